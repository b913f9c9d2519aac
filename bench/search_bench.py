"""Search latency benchmark (issue 6): `POST /api/v1/memory/search` at 100k and 1M memories.

Each level runs in its own `mneme serve` (embedded PostgreSQL, worker off), so each
HNSW index holds exactly that level's vectors. A level is one big store (a fifth of the
memories: 20k at 100k, 200k at 1M) plus small stores of 1,000 memories.

Vectors are real model output. All 4,512 LoCoMo turns and the questions are encoded
once with the bundled model (cached under the temp directory, never in the repository).
The big store's first 4,512 memories are the turns themselves; every further memory is
two turns joined (text a + " " + text b) with the normalised sum of their two vectors.
Encoding a million texts on a 2-core machine would take hours; sums of real vectors
keep the distribution of real ones (the same directions, the same neighbourhoods).

In one run, per level, interleaved query by query (LoCoMo questions, Tablet 2 defaults):
- the floor: the bare model encoding the query (`SentenceTransformer.encode`), and the
  service's retrieval SQL alone on a pooled connection (same statement and parameters);
- the service through HTTP, one client (client-side latency);
- 16 concurrent clients for a fixed time (searches/s), next to the bare encoder's
  throughput on batches of 16 questions;
- recall@10 of the served vector arm (HNSW, iterative scan) vs an exact scan of the
  same store, on the big store.

    .venv/bin/python -m bench.search_bench [--levels 100000,1000000] [--queries 200]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import numpy as np
import numpy.typing as npt

from bench.common import LOCOMO, Server, load_turns, machine, summary_ms, write_results
from embeddings import document_text
from embeddings.model import SentenceTransformerEmbedder
from service.ops import db
from service.queries import search as sq
from service.queries.keys import Principal
from service.queries.search import SearchFilters
from service.retrieval import store_indexes
from service.settings import Settings

KEY = "bench-bootstrap-key-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {KEY}"}
SMALL_STORE = 1_000
CONCURRENCY = 16

LOAD = """
INSERT INTO memories (workspace_id, id, store_id, text, speaker, scope, provider, provider_ref,
                      content_sha256, content_size_bytes, first_seen_at, last_used_at,
                      created_at, updated_at, event_date, embedding, embedding_model,
                      embedding_status, text_tokens)
SELECT $1, 'mem_bench' || to_char(g, 'FM0000000'),
       CASE WHEN g < $4 THEN $5 ELSE ($6::text[])[1 + (g - $4) / $7] END,
       CASE WHEN g < n.n THEN a.text ELSE a.text || ' ' || b.text END,
       a.speaker, 'workspace', 'bench', 'ref-' || g, md5(g::text), 64,
       a.ts, a.ts, a.ts, a.ts, a.ts,
       CASE WHEN g < n.n THEN a.e ELSE l2_normalize(a.e + b.e) END, $8, 'ready',
       CASE WHEN g < n.n THEN a.tokens ELSE a.tokens + b.tokens END
FROM generate_series($2::int, $3::int - 1) AS g
CROSS JOIN (SELECT count(*)::int AS n FROM bench_base) n
JOIN bench_base a ON a.i = g % n.n
JOIN bench_base b ON b.i = (g % n.n + (g / n.n) * 1009) % n.n
"""

OWN_INDEX_BUILT = """
SELECT built_at IS NOT NULL FROM store_vector_indexes WHERE workspace_id = $1 AND store_id = $2
"""

# Dropped for the bulk load and built after it, as the migrations define them.
INDEXES = ("memories_search_tsv", "memories_embedding")


def embed_locomo(embedder: SentenceTransformerEmbedder) -> tuple[Any, Any, list[str]]:
    """Turn vectors (the text the worker would embed) and question vectors, cached."""
    turns = load_turns()
    questions = [json.loads(line)["question"] for line in (LOCOMO / "queries.jsonl").open()]
    docs = [document_text(t.text, t.speaker) for t in turns]
    digest = hashlib.sha256("\n".join([embedder.name, *docs, *questions]).encode()).hexdigest()
    cache = Path(tempfile.gettempdir()) / f"mneme-bench-locomo-{digest[:16]}.npz"
    if cache.exists():
        saved = np.load(cache)
        return saved["turns"], saved["questions"], questions
    started = time.perf_counter()
    turn_vecs = embedder.encode_documents(docs)
    question_vecs = embedder.encode_queries(questions)
    print(f"encoded {len(docs)} turns + {len(questions)} questions "
          f"in {time.perf_counter() - started:.0f} s", flush=True)  # fmt: skip
    np.savez(cache, turns=turn_vecs, questions=question_vecs)
    return turn_vecs, question_vecs, questions


async def load(
    url: str, total: int, turn_vecs: Any, embedder: SentenceTransformerEmbedder
) -> dict[str, Any]:
    """The level's stores and memories; returns the big store's id, the small ones' ids.

    Rows are written as the worker leaves them: vector, model, and the text's token count
    (a joined pair has the two turns' counts: WordPiece splits at the space first)."""
    from service.ids import new_id

    turns = load_turns()
    tokens = embedder.count_tokens_many([t.text for t in turns])
    model_name = embedder.name
    big_n = total // 5
    n_small = (total - big_n) // SMALL_STORE
    conn = await asyncpg.connect(url)
    await db._init_connection(conn)
    timings: dict[str, float] = {}
    try:
        ws = await conn.fetchval("SELECT id FROM workspaces WHERE name = 'default'")
        big = new_id("memstore")
        await conn.execute(
            "INSERT INTO stores (workspace_id, id, name) VALUES ($1, $2, 'big')", ws, big
        )
        small = [new_id("memstore") for _ in range(n_small)]
        await conn.executemany(
            "INSERT INTO stores (workspace_id, id, name) VALUES ($1, $2, $3)",
            [(ws, s, f"small-{i:04d}") for i, s in enumerate(small)],
        )
        await conn.execute(
            "CREATE TEMP TABLE bench_base (i int PRIMARY KEY, text text, speaker text, "
            "ts timestamptz, e vector(384), tokens int)"
        )
        await conn.copy_records_to_table(
            "bench_base",
            records=[
                (i, t.text, t.speaker, _ts(t.timestamp), turn_vecs[i], tokens[i])
                for i, t in enumerate(turns)
            ],
        )
        ddl = {
            name: await conn.fetchval("SELECT indexdef FROM pg_indexes WHERE indexname = $1", name)
            for name in INDEXES
        }
        for name in INDEXES:
            await conn.execute(f"DROP INDEX {name}")
        started = time.perf_counter()
        step = 100_000
        for first in range(0, big_n + n_small * SMALL_STORE, step):
            last = min(first + step, big_n + n_small * SMALL_STORE)
            await conn.execute(LOAD, ws, first, last, big_n, big, small, SMALL_STORE, model_name)
        timings["insert_s"] = round(time.perf_counter() - started, 1)
        await conn.execute("SET maintenance_work_mem = '8GB'")
        await conn.execute("SET max_parallel_maintenance_workers = 1")
        for name in INDEXES:
            started = time.perf_counter()
            await conn.execute(ddl[name])
            timings[f"{name}_build_s"] = round(time.perf_counter() - started, 1)
        # The big store's own HNSW index, as the janitor builds it (retrieval.store_indexes):
        # built here, not a minute later on the janitor's next pass.
        started = time.perf_counter()
        own_from = Settings().store_index_min
        while own_from and big_n >= own_from and not await conn.fetchval(OWN_INDEX_BUILT, ws, big):
            if await store_indexes.reconcile(url, own_from) is None:
                await asyncio.sleep(1)  # the janitor is at it
        timings["own_index_build_s"] = round(time.perf_counter() - started, 1)
        started = time.perf_counter()
        await conn.execute("VACUUM ANALYZE memories")
        timings["vacuum_analyze_s"] = round(time.perf_counter() - started, 1)
        count = await conn.fetchval("SELECT count(*) FROM memories WHERE workspace_id = $1", ws)
        print(f"loaded {count} memories: {timings}", flush=True)
    finally:
        await conn.close()
    return {"workspace": ws, "big": big, "small": small, "big_n": big_n, "memories": count,
            "load": timings}  # fmt: skip


def _ts(raw: str) -> Any:
    from datetime import UTC, datetime

    return datetime.fromisoformat(raw).replace(tzinfo=UTC)


def principal(ws: str) -> Principal:
    return Principal(
        key_id="bench", workspace_id=ws, workspace_tier="scale", kind="service", member=None,
        scopes=frozenset({"memory:read"}), rooms=[],
    )  # fmt: skip


async def sql_alone(
    conn: asyncpg.Connection,
    who: Principal,
    store: str,
    vector: Any,
    query: str,
    exact: bool | None = None,
) -> list[sq.Candidate]:
    """The SQL the service runs for `memories` on Tablet 2 defaults: the store with its
    profile, and the retrieval statement (exact or HNSW as the service would choose)."""
    found = await sq.store_and_profile(conn, who.workspace_id, store)
    assert found is not None
    _, stats = found
    return await sq.candidates(conn, sq.RetrievalRequest(
        principal=who, store_id=store, profile=stats, query_text=query, vector=vector,
        filters=SearchFilters(), per_arm=80, self_only=False, images=False, exact=exact,
    ))  # fmt: skip


async def search(
    session: aiohttp.ClientSession,
    base: str,
    store: str,
    query: str,
    phases: dict[str, list[float]] | None = None,
) -> float:
    started = time.perf_counter()
    async with session.post(
        f"{base}/api/v1/memory/search", json={"user_id": store, "query": query}
    ) as resp:
        body = await resp.json()
        assert resp.status == 200, body
    if phases is not None:  # Server-Timing: app (all of it), embed, retrieve
        for part in resp.headers["Server-Timing"].split(","):
            name, dur = part.strip().split(";dur=")
            phases.setdefault(name, []).append(float(dur) / 1000)
    return time.perf_counter() - started


async def measure(
    server: Server,
    level: dict[str, Any],
    embedder: SentenceTransformerEmbedder,
    questions: list[str],
    question_vecs: Any,
    n_queries: int,
    seconds: float,
    bare_qps: dict[str, float],
) -> dict[str, Any]:
    url = server.database_url()
    pool = await db.create_pool(url, Settings(database_url=url, pool_min=1, pool_max=4))
    who = principal(level["workspace"])
    # Every search asks a question the service has not seen (its query-vector cache would
    # answer a repeat without the model): each phase takes its own questions.
    rng = random.Random(11)
    order = rng.sample(range(len(questions)), len(questions))
    model = embedder._model
    out: dict[str, Any] = {}
    try:
        async with aiohttp.ClientSession(headers=HEADERS) as session:
            for kind in ("big", "small"):
                picks, order = order[: n_queries + 20], order[n_queries + 20 :]
                encode_t, sql_t, floor_t, http_t = [], [], [], []
                phases: dict[str, list[float]] = {}
                for n, qi in enumerate(picks):  # the first 20 warm up
                    store = level["big"] if kind == "big" else rng.choice(level["small"])
                    query = questions[qi]
                    started = time.perf_counter()
                    vector = model.encode([query], normalize_embeddings=True)[0]
                    encoded = time.perf_counter()
                    async with pool.acquire() as conn:
                        t0 = time.perf_counter()
                        await sql_alone(conn, who, store, vector, query)
                        sql_s = time.perf_counter() - t0
                    measured = n >= 20
                    http_s = await search(
                        session, server.base, store, query, phases if measured else None
                    )
                    if measured:
                        encode_t.append(encoded - started)
                        sql_t.append(sql_s)
                        floor_t.append(encoded - started + sql_s)
                        http_t.append(http_s)
                enc, sql, srv = summary_ms(encode_t), summary_ms(sql_t), summary_ms(http_t)
                floor_p50 = enc["p50_ms"] + sql["p50_ms"]
                out[kind] = {
                    "encode": enc, "sql": sql, "floor_sum": summary_ms(floor_t), "search": srv,
                    "floor_p50_ms": round(floor_p50, 3),
                    "ratio_p50_search_over_floor": round(srv["p50_ms"] / floor_p50, 3),
                    "server_timing": {name: summary_ms(v) for name, v in phases.items()},
                }  # fmt: skip
            # Enough for each phase to last ``seconds`` at 600 searches/s.
            need = int(600 * seconds)
            unseen = unseen_variants([questions[i] for i in order], 2 * need)
            for kind, share in (("big", unseen[:need]), ("small", unseen[need : 2 * need])):
                out[kind]["throughput"] = await concurrent(server, level, kind, share, seconds)
            for kind in ("big", "small"):
                qps = out[kind]["throughput"]["searches_per_s"]
                out[kind]["throughput"]["ratio_to_bare_batch16"] = round(qps / bare_qps["16"], 3)
            sample = random.Random(5).sample(range(len(questions)), n_queries)
            out["recall_at_10_hnsw_vs_exact"] = await recall(
                pool, who, level["big"], question_vecs, sample
            )
            out["plan_big"] = await explain(
                pool, who, level["big"], question_vecs[sample[0]], questions[sample[0]]
            )
    finally:
        await pool.close()
    return out


def unseen_variants(questions: list[str], needed: int) -> list[str]:
    """At least ``needed`` texts the service has not seen: ``questions``, then copies of
    them in other letter cases (every k-th letter upper-cased, the rest lower), each
    costing what its original costs and answered as it is: the model's tokenizer and
    to_tsvector both lower-case their input (same vector, same lexemes), while the
    service's query-vector cache, keyed by the text, misses. 1,557 LoCoMo questions last
    16 clients a few seconds; two concurrent phases of 10 s need more."""
    out, seen = list(questions), set(questions)
    k = 1
    while len(out) < needed:
        for q in questions:
            variant = "".join(ch.upper() if i % k == 0 else ch.lower() for i, ch in enumerate(q))
            if variant not in seen:
                seen.add(variant)
                out.append(variant)
        k += 1
    return out


async def concurrent(
    server: Server, level: dict[str, Any], kind: str, queries: list[str], seconds: float
) -> dict[str, Any]:
    """CONCURRENCY clients for ``seconds``, each search a question not asked before
    (``queries`` is shared and consumed; the run ends early if it runs out).

    Also the CPU each search cost, by process: with every process on the same cores,
    cores / CPU per search is the most searches per second the machine can do."""
    base = server.base
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def client(i: int, session: aiohttp.ClientSession) -> None:
        rng = random.Random(i)
        while time.perf_counter() < deadline and queries:
            store = level["big"] if kind == "big" else rng.choice(level["small"])
            latencies.append(await search(session, base, store, queries.pop()))

    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(headers=HEADERS, connector=connector) as session:
        before = server.cpu_seconds()
        started = time.perf_counter()
        await asyncio.gather(*(client(i, session) for i in range(CONCURRENCY)))
        elapsed = time.perf_counter() - started
        after = server.cpu_seconds()
    n = max(1, len(latencies))
    cpu_ms = {k: round((after[k] - before[k]) / n * 1000, 2) for k in before}
    total_ms = sum(cpu_ms.values())
    return {
        "clients": CONCURRENCY, "seconds": round(elapsed, 1), "searches": len(latencies),
        "searches_per_s": round(len(latencies) / elapsed, 1), "latency": summary_ms(latencies),
        "cpu_ms_per_search": {**cpu_ms, "total": round(total_ms, 2)},
        "cpu_bound_searches_per_s": round((os.cpu_count() or 1) * 1000 / total_ms, 1),
    }  # fmt: skip


def bare_batch_qps(model: Any, questions: list[str], batch: int, n: int = 640) -> float:
    """Questions per second of ``SentenceTransformer.encode`` on batches of ``batch``."""
    texts = questions[:n]
    model.encode(texts[:batch], batch_size=batch)
    started = time.perf_counter()
    for first in range(0, len(texts), batch):
        model.encode(texts[first : first + batch], batch_size=batch, normalize_embeddings=True)
    return round(len(texts) / (time.perf_counter() - started), 1)


async def recall(
    pool: asyncpg.Pool, who: Principal, store: str, question_vecs: Any, picks: list[int]
) -> dict[str, Any]:
    """Top 10 by cosine of the served vector arm (HNSW) vs an exact scan of the store."""
    hits = total = 0
    async with pool.acquire() as conn:
        for qi in picks:
            vector = question_vecs[qi]
            served = await sql_alone(conn, who, store, vector, "", exact=False)
            exact = await sql_alone(conn, who, store, vector, "", exact=True)
            top = {c.id for c in sorted(served, key=lambda c: -(c.cosine or 0))[:10]}
            truth = {c.id for c in sorted(exact, key=lambda c: -(c.cosine or 0))[:10]}
            hits += len(top & truth)
            total += len(truth)
    return {"queries": len(picks), "recall": round(hits / total, 4)}


async def explain(
    pool: asyncpg.Pool, who: Principal, store: str, vector: npt.NDArray[np.float32], query: str
) -> list[str]:
    async with pool.acquire() as conn:
        found = await sq.store_and_profile(conn, who.workspace_id, store)
        assert found is not None
        _, stats = found
        values = sq.statement_values(sq.RetrievalRequest(
            principal=who, store_id=store, profile=stats, query_text=query, vector=vector,
            filters=sq.SearchFilters(), per_arm=80, self_only=False, images=False,
        ), budget=sq.MATCH_BUDGET)  # fmt: skip
        ann = sq.STATEMENTS[False, "all"]
        text_arm, vector_arm = ann.text, ann.vector
        ranks = await sq.text_ranks(conn, ann, values)
        lines = []
        for statement, args in (
            (text_arm, text_arm.args_among(values)),
            (vector_arm, vector_arm.args_among({**values, "text_ids": list(ranks)})),
        ):
            rows = await conn.fetch("EXPLAIN (ANALYZE, COSTS OFF) " + statement.sql, *args)
            lines += [r[0] for r in rows]
    return lines


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--levels", default="100000,1000000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--no-write", action="store_true", help="print, do not save results")
    args = parser.parse_args()
    embedder = SentenceTransformerEmbedder()
    turn_vecs, question_vecs, questions = embed_locomo(embedder)
    # The encoder's batch throughput on a quiet machine (before any server runs).
    bare_qps = {str(b): bare_batch_qps(embedder._model, questions, b) for b in (1, 16, 64)}
    print(f"bare encoder q/s by batch size: {bare_qps}", flush=True)
    results: dict[str, Any] = {
        "machine": machine(), "args": vars(args), "bare_encoder_qps_by_batch": bare_qps,
        "levels": {},
    }  # fmt: skip
    for total in (int(x) for x in args.levels.split(",")):
        with tempfile.TemporaryDirectory(prefix="mneme-bench-") as tmp:
            server = Server(Path(tmp) / "data", KEY, MNEME_WORKER="off")
            try:
                await server.ready()
                level = await load(server.database_url(), total, turn_vecs, embedder)
                figures = await measure(
                    server,
                    level,
                    embedder,
                    questions,
                    question_vecs,
                    args.queries,
                    args.seconds,
                    bare_qps,
                )
                results["levels"][str(total)] = {
                    "memories": level["memories"], "big_store": level["big_n"],
                    "small_stores": len(level["small"]), "load": level["load"], **figures,
                }  # fmt: skip
                print(json.dumps({k: v for k, v in figures.items() if k != "plan_big"}, indent=1),
                      flush=True)  # fmt: skip
            finally:
                server.stop()
    # Once more at the end, with nothing else running: the ratio uses the higher figure.
    after = {str(b): bare_batch_qps(embedder._model, questions, b) for b in (1, 16, 64)}
    results["bare_encoder_qps_by_batch_at_end"] = after
    print(f"bare encoder q/s by batch size, at the end: {after}", flush=True)
    if float(after["16"]) > float(bare_qps["16"]):
        for lv in results["levels"].values():
            for kind in ("big", "small"):
                t = lv[kind]["throughput"]
                t["ratio_to_bare_batch16"] = round(t["searches_per_s"] / after["16"], 3)
    if not args.no_write:
        path = write_results("search", results)
        (path.parent / "search.md").write_text(render(results))


def render(r: dict[str, Any]) -> str:
    m = r["machine"]
    bare = r["bare_encoder_qps_by_batch"]
    end = r.get("bare_encoder_qps_by_batch_at_end", bare)
    lines = [
        "# Search latency benchmark",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; Python {m['python']}, "
        f"torch {m['torch']} ({m['torch_threads']} threads), CPU only. Run {m['date']}.",
        "Client, `mneme serve`, embedded PostgreSQL and the model share these cores.",
        "",
        f"Command: `.venv/bin/python -m bench.search_bench --levels {r['args']['levels']} "
        f"--queries {r['args']['queries']} --seconds {r['args']['seconds']:g}`",
        "",
        "Each level is its own `mneme serve` (worker off): one big store holding a fifth of "
        "the memories plus stores of 1,000. Vectors are real model output: the 4,512 LoCoMo "
        "turns as they are, then pairs of turns (joined text, normalised sum of the two "
        "vectors). Queries are LoCoMo questions, Tablet 2 defaults (20 results, "
        "self_memories, images).",
        "",
        f"Bare encoder (`SentenceTransformer.encode`, no server running), before / after the "
        f"levels: {bare['1']} / {end['1']} q/s one at a time, {bare['16']} / {end['16']} q/s "
        f"in batches of 16, {bare['64']} / {end['64']} q/s in batches of 64. Ratios below use "
        "the higher batch-of-16 figure.",
        "",
        "## Single client: search vs the floor (p50/p95/p99 ms)",
        "",
        "| memories | store | encode alone | SQL alone | floor p50 (sum) | search | "
        "search p50 / floor p50 |",
        "|---|---|---|---|---|---|---|",
    ]

    def three(s: dict[str, Any]) -> str:
        return f"{s['p50_ms']:.1f} / {s['p95_ms']:.1f} / {s['p99_ms']:.1f}"

    for total, lv in r["levels"].items():
        for kind in ("big", "small"):
            k = lv[kind]
            label = f"big ({lv['big_store']:,})" if kind == "big" else "small (1,000)"
            lines.append(
                f"| {int(total):,} | {label} | {three(k['encode'])} | {three(k['sql'])} | "
                f"{k['floor_p50_ms']:.1f} | {three(k['search'])} | "
                f"**{k['ratio_p50_search_over_floor']:.2f}** |"
            )
    lines += [
        "",
        "Floor = the bare model encoding the query + the service's SQL for it (the store with "
        "its profile, and the retrieval statement) on a pooled connection, measured query by query "
        "between the searches. Search = client-side latency of `POST /api/v1/memory/search`.",
        "",
        f"## {CONCURRENCY} concurrent clients",
        "",
        "| memories | store | searches/s | p50 ms | p95 ms | / bare encoder batch 16 | "
        "CPU ms per search: service loop + model / PostgreSQL / client = total | "
        "CPU-bound ceiling |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for total, lv in r["levels"].items():
        for kind in ("big", "small"):
            t = lv[kind]["throughput"]
            c = t["cpu_ms_per_search"]
            lines.append(
                f"| {int(total):,} | {kind} | {t['searches_per_s']} | {t['latency']['p50_ms']:.0f}"
                f" | {t['latency']['p95_ms']:.0f} | **{t['ratio_to_bare_batch16']:.2f}** | "
                f"{c['service_loop']:.1f} + {c['service_model']:.1f} / {c['postgres']:.1f} / "
                f"{c['client']:.1f} = {c['total']:.1f}"
                f" | {t['cpu_bound_searches_per_s']}/s |"
            )
    lines += [
        "",
        f"CPU per search is measured over the {CONCURRENCY}-client run (user + system time of "
        "`mneme serve`'s event loop thread and of its model's threads, of PostgreSQL's "
        "processes, and of the client). "
        f"The ceiling is {os.cpu_count()} cores / that total: what these cores could serve "
        "if nothing waited. For scale, the bare encoder's batch-16 throughput spends "
        f"{os.cpu_count() or 1} x 1000 / {bare['16']} = "
        f"{(os.cpu_count() or 1) * 1000 / float(bare['16']):.1f} CPU ms per question on "
        "encoding alone; 0.8 x that throughput would leave each search "
        f"{(os.cpu_count() or 1) * 1000 / (0.8 * float(bare['16'])):.1f} CPU ms in all, "
        "encoding, HTTP, SQL and the client included.",
    ]
    lines += [
        "",
        "## HNSW recall@10 vs exact (big store, real question vectors)",
        "",
        "| memories | big store | queries | recall@10 |",
        "|---|---|---|---|",
    ]
    for total, lv in r["levels"].items():
        rc = lv["recall_at_10_hnsw_vs_exact"]
        lines.append(f"| {int(total):,} | {lv['big_store']:,} | {rc['queries']} | {rc['recall']} |")
    lines += ["", "## Loading (not part of the measurement)", ""]
    for total, lv in r["levels"].items():
        lines.append(f"- {int(total):,}: {lv['load']}")
    big = list(r["levels"].values())[-1]
    lines += ["", "## Plan of the big store's statement (largest level)", "", "```"]
    lines += [line for line in big["plan_big"] if "::vector" not in line]
    lines += ["```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    asyncio.run(main())
