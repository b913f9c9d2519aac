"""Write-path benchmark (issue 3), all numbers from one run on one machine.

1. Write latency through the HTTP API of a real `mneme serve` (embedded PostgreSQL,
   worker off): single-memory POSTs and 100-memory batches of LoCoMo turns.
2. Worker throughput as a ratio to bare ``SentenceTransformer.encode`` on the same
   texts (what the worker embeds: "speaker: text") with the same batch size, measured
   back to back in this process, twice, alternating.
3. Write-to-vector lag under a steady write rate, against `mneme serve` with its
   in-process worker on: the time from a write's 2xx to its vector being stored.

    .venv/bin/python -m bench.write_bench [--singles 600] [--worker-texts 2048]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from bench.common import Server, load_turns, machine, summary_ms, write_results
from embeddings import document_text
from embeddings.model import SentenceTransformerEmbedder
from embeddings.worker import Worker, WorkerConfig
from service.ops import db
from service.settings import Settings

KEY = "bench-bootstrap-key-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {KEY}"}
REQUEUE = """
UPDATE memories SET embedding_status = 'pending', embedding = NULL,
       embedding_generation = embedding_generation + 1, embedding_lease_until = NULL
WHERE id = ANY($1::text[])
"""


async def create_stores(url: str, names: list[str]) -> None:
    """One store per conversation (SQL until the Memory Store face can create them)."""
    from service.ids import new_id

    conn = await asyncpg.connect(url)
    try:
        ws = await conn.fetchval("SELECT id FROM workspaces WHERE name = 'default'")
        for name in names:
            await conn.execute(
                "INSERT INTO stores (workspace_id, id, name) VALUES ($1, $2, $3) "
                "ON CONFLICT DO NOTHING",
                ws, new_id("memstore"), name,
            )  # fmt: skip
    finally:
        await conn.close()


def body_of(turn: Any) -> dict[str, Any]:
    return {"text": turn.text, "store": turn.store, "speaker": turn.speaker,
            "eventDate": turn.timestamp, "providerRef": turn.uid}  # fmt: skip


async def bench_writes(
    server: Server, turns: list[Any], singles: int
) -> tuple[dict[str, Any], list[str]]:
    single_lat: list[float] = []
    batch_lat: list[float] = []
    ids: list[str] = []
    async with aiohttp.ClientSession(headers=HEADERS) as session:
        for turn in turns[:singles]:
            started = time.perf_counter()
            async with session.post(f"{server.base}/api/v1/memories", json=body_of(turn)) as resp:
                body = await resp.json()
                assert resp.status == 201, body
            single_lat.append(time.perf_counter() - started)
            ids.append(body["id"])
        rest = turns[singles:]
        for start in range(0, len(rest), 100):
            chunk = rest[start : start + 100]
            started = time.perf_counter()
            async with session.post(
                f"{server.base}/api/v1/memories", json={"memories": [body_of(t) for t in chunk]}
            ) as resp:
                body = await resp.json()
                assert resp.status == 200, body
            batch_lat.append(time.perf_counter() - started)
            ids.extend(m["id"] for m in body["memories"])
    return {
        "single_write": summary_ms(single_lat),
        "batch_of_100_write": summary_ms(batch_lat),
        "batch_per_memory_ms": round(1000 * sum(batch_lat) / max(1, len(turns) - singles), 3),
    }, ids


async def bench_worker(
    url: str, embedder: SentenceTransformerEmbedder, ids: list[str], batch: int, rounds: int = 3
) -> dict[str, Any]:
    pool = await db.create_pool(url, Settings(database_url=url, pool_min=1, pool_max=4))
    try:
        rows = await pool.fetch(
            "SELECT id, text, speaker FROM memories WHERE id = ANY($1::text[]) ORDER BY id", ids
        )
        texts = [document_text(r["text"], r["speaker"]) for r in rows]
        model = embedder._model
        model.encode(texts[:64], batch_size=batch)  # warm-up, both paths alike
        worker = Worker(pool, embedder, WorkerConfig())
        await pool.execute(REQUEUE, [r["id"] for r in rows[:64]])
        await worker.drain()
        runs = []
        for _ in range(rounds):
            started = time.perf_counter()
            model.encode(texts, batch_size=batch, normalize_embeddings=True, convert_to_numpy=True)
            bare = time.perf_counter() - started

            await pool.execute(REQUEUE, [r["id"] for r in rows])
            worker.stats.embedded = 0
            started = time.perf_counter()
            claimed = await worker.drain()
            through_worker = time.perf_counter() - started
            assert claimed == len(rows) and worker.stats.embedded == len(rows)
            runs.append({
                "bare_encode_s": round(bare, 3),
                "worker_s": round(through_worker, 3),
                "bare_texts_per_s": round(len(texts) / bare, 1),
                "worker_texts_per_s": round(len(texts) / through_worker, 1),
                "ratio": round(bare / through_worker, 3),
            })  # fmt: skip
        ratios = sorted(r["ratio"] for r in runs)
        return {"texts": len(texts), "batch_size": batch, "runs": runs,
                "ratio_median": ratios[len(ratios) // 2], "ratio_worst": ratios[0]}  # fmt: skip
    finally:
        await pool.close()


async def bench_lag(
    server: Server, turns: list[Any], rate: float, seconds: float
) -> dict[str, Any]:
    url = server.database_url()
    conn = await asyncpg.connect(url)
    acked: dict[str, float] = {}
    ready_at: dict[str, float] = {}
    stop = asyncio.Event()

    async def watch() -> None:
        while not stop.is_set() or len(ready_at) < len(acked):
            waiting = [i for i in acked if i not in ready_at]
            if waiting:
                done = await conn.fetch(
                    "SELECT id FROM memories "
                    "WHERE id = ANY($1::text[]) AND embedding_status = 'ready'",
                    waiting,
                )
                now = time.perf_counter()
                for r in done:
                    ready_at[r["id"]] = now
            await asyncio.sleep(0.02)

    watcher = asyncio.create_task(watch())
    async with aiohttp.ClientSession(headers=HEADERS) as session:
        start = time.perf_counter()
        for n, turn in enumerate(turns):
            due = start + n / rate
            if due - start > seconds:
                break
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            body = {**body_of(turn), "providerRef": f"lag-{rate}-{turn.uid}"}
            async with session.post(f"{server.base}/api/v1/memories", json=body) as resp:
                memory = await resp.json()
                acked[memory["id"]] = time.perf_counter()
    stop.set()
    await asyncio.wait_for(watcher, timeout=120)
    await conn.close()
    lags = [ready_at[i] - acked[i] for i in acked]
    return {"rate_per_s": rate, "seconds": seconds, "writes": len(acked), "lag": summary_ms(lags)}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--singles", type=int, default=600)
    parser.add_argument("--total", type=int, default=2600, help="turns written (singles + batches)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lag-seconds", type=float, default=20.0)
    args = parser.parse_args()

    turns = load_turns()
    stores = sorted({t.store for t in turns})
    results: dict[str, Any] = {"machine": machine(), "args": vars(args)}
    with tempfile.TemporaryDirectory(prefix="mneme-bench-") as tmp:
        data_dir = Path(tmp) / "data"
        server = Server(data_dir, KEY, MNEME_WORKER="off")
        try:
            await server.ready()
            url = server.database_url()
            await create_stores(url, stores)
            async with aiohttp.ClientSession(headers=HEADERS) as session:
                for store in stores:
                    for speaker in sorted({t.speaker for t in turns if t.store == store}):
                        await session.post(
                            f"{server.base}/api/v1/stores/{store}/speakers", json={"name": speaker}
                        )
            print("writing…", flush=True)
            results["writes"], ids = await bench_writes(server, turns[: args.total], args.singles)
            print(results["writes"], flush=True)
            embedder = SentenceTransformerEmbedder(batch_size=args.batch)
            print("worker vs bare encode…", flush=True)
            results["worker"] = await bench_worker(url, embedder, ids, args.batch)
            print(results["worker"], flush=True)
        finally:
            server.stop()

        server = Server(data_dir, KEY, MNEME_WORKER="on", MNEME_EMBED_BATCH_SIZE=str(args.batch))
        try:
            await server.ready()
            results["lag"] = []
            for rate in (10.0, 40.0):
                print(f"lag at {rate}/s…", flush=True)
                lag = await bench_lag(server, turns[args.total :], rate, args.lag_seconds)
                results["lag"].append(lag)
                print(lag, flush=True)
        finally:
            server.stop()
    path = write_results("write", results)
    (path.parent / "write.md").write_text(render(results))
    print(f"wrote {path} and write.md")


def render(results: dict[str, Any]) -> str:
    """The committed summary, made from the JSON of the same run."""
    m, w, k = results["machine"], results["writes"], results["worker"]
    lines = [
        "# Write path benchmark",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; Python {m['python']}, "
        f"torch {m['torch']} ({m['torch_threads']} threads), CPU only. Run {m['date']}.",
        "Client, `mneme serve`, embedded PostgreSQL and the model share these cores.",
        "",
        "Command: `.venv/bin/python -m bench.write_bench` (LoCoMo turns from ../shared/data).",
        "",
        "## Write latency through the HTTP API (client-side, worker off)",
        "",
        "| request | n | p50 ms | p95 ms | p99 ms |",
        "|---|---|---|---|---|",
    ]
    for label, key in (("one memory", "single_write"), ("batch of 100", "batch_of_100_write")):
        s = w[key]
        lines.append(f"| {label} | {s['n']} | {s['p50_ms']} | {s['p95_ms']} | {s['p99_ms']} |")
    lines += [
        "",
        f"Batches cost {w['batch_per_memory_ms']} ms per memory.",
        "",
        f"## Worker throughput vs bare `SentenceTransformer.encode` ({k['texts']} texts, "
        f"model batch {k['batch_size']})",
        "",
        "| round | bare encode s | worker s | bare texts/s | worker texts/s | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(k["runs"], 1):
        lines.append(
            f"| {i} | {r['bare_encode_s']} | {r['worker_s']} | {r['bare_texts_per_s']} | "
            f"{r['worker_texts_per_s']} | {r['ratio']} |"
        )
    lines += [
        "",
        f"Median ratio {k['ratio_median']}, worst {k['ratio_worst']}.",
        "",
        "Ratio = bare time / worker time (target ≥ 0.9). The worker's time includes claiming, "
        "chunking, encoding in a thread and storing vectors (HNSW inserts) in PostgreSQL.",
        "",
        "## Write-to-vector lag under a steady write rate (`mneme serve`, worker on)",
        "",
        "| writes/s | writes | p50 ms | p95 ms | p99 ms |",
        "|---|---|---|---|---|",
    ]
    for lag in results["lag"]:
        s = lag["lag"]
        lines.append(
            f"| {lag['rate_per_s']:g} | {lag['writes']} | {s['p50_ms']} | {s['p95_ms']} | "
            f"{s['p99_ms']} |"
        )
    lines += [
        "",
        "Lag: from the write's 2xx to the row's vector being stored (polled every 20 ms).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    asyncio.run(main())
