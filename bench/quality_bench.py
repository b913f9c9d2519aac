"""Retrieval quality on LoCoMo (issue 6), measured through the service's HTTP API only.

Each conversation becomes a store (created through the Memory Store face), its
speakers are registered, and every dialog turn is written through `POST
/api/v1/memories` (speaker, `eventDate` from the session time, `providerRef` = the
turn's dia_id; a shared image's caption is part of the turn's text). After the worker
has embedded everything, each question is asked through `POST /api/v1/memory/search`
and the returned memories are mapped back to dia_ids.

recall@k = |evidence ∩ top-k| / |evidence|, averaged over questions with evidence;
categories 1-4 are the headline, 5 (adversarial) is reported apart.

    .venv/bin/python -m bench.quality_bench [--conversations 8]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from bench import personas, ranking_folds
from bench.common import LOCOMO, Server, load_turns, machine, wait_embedded, write_results

KEY = "bench-bootstrap-key-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {KEY}"}
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def turn_text(text: str, caption: str | None) -> str:
    return f"{text} [shared an image: {caption}]" if caption else text


async def ingest(
    session: aiohttp.ClientSession, base: str, turns: list[Any]
) -> dict[str, dict[str, str]]:
    """Write every turn; returns store -> memory id -> dia_id."""
    by_store: dict[str, list[Any]] = defaultdict(list)
    for t in turns:
        by_store[t.store].append(t)
    ids: dict[str, dict[str, str]] = {}
    for store, store_turns in by_store.items():
        async with session.post(f"{base}/api/v1/forward/memory_stores", json={"name": store}) as r:
            assert r.status == 201, await r.text()
        for speaker in sorted({t.speaker for t in store_turns}):
            async with session.post(
                f"{base}/api/v1/stores/{store}/speakers", json={"name": speaker}
            ) as r:
                assert r.status == 201, await r.text()
        ids[store] = {}
        for first in range(0, len(store_turns), 500):
            batch = store_turns[first : first + 500]
            body = {"memories": [
                {"text": turn_text(t.text, t.image_caption), "store": store, "speaker": t.speaker,
                 "eventDate": t.timestamp, "providerRef": t.dia_id}
                for t in batch
            ]}  # fmt: skip
            async with session.post(f"{base}/api/v1/memories", json=body) as r:
                out = await r.json()
                assert r.status == 200, out
            for t, m in zip(batch, out["memories"], strict=True):
                ids[store][m["id"]] = t.dia_id
    return ids


@contextlib.asynccontextmanager
async def locomo_written(
    prefix: str,
) -> AsyncIterator[tuple[Server, Path, dict[str, dict[str, str]]]]:
    """A fresh ``mneme serve`` with every LoCoMo turn written and embedded: the server,
    its data directory, and store -> memory id -> dia_id (for the offline labs)."""
    turns = load_turns()
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        server = Server(Path(tmp) / "data", KEY)
        try:
            await server.ready()
            async with aiohttp.ClientSession(headers=HEADERS) as session:
                ids = await ingest(session, server.base, turns)
                await wait_embedded(session, server.base)
            yield server, Path(tmp) / "data", ids
        finally:
            server.stop()


def load_queries(stores: set[str]) -> list[dict[str, Any]]:
    out = []
    with (LOCOMO / "queries.jsonl").open() as f:
        for line in f:
            q = json.loads(line)
            if q["store"] in stores and q["evidence"]:
                out.append(q)
    return out


async def ask(
    session: aiohttp.ClientSession,
    base: str,
    q: dict[str, Any],
    ids: dict[str, dict[str, str]],
    *,
    model: str,
    max_results: int,
    verify: int = 0,
    timings: list[dict[str, float]] | None = None,
) -> list[str]:
    """The dia_ids of what one question found; ``timings``: gets the service's own account
    of its time (``Server-Timing``: ``app`` for all of it, then its phases), in ms."""
    body: dict[str, Any] = {
        "user_id": q["store"],
        "query": q["question"],
        "max_results": max_results,
    }
    if verify:
        body["verify"] = verify
    async with session.post(
        f"{base}/api/v1/memory/search", json=body, headers={"X-WOS-Model": model}
    ) as r:
        out = await r.json()
        assert r.status == 200, out
        if timings is not None:
            spans = (
                span.strip().partition(";dur=") for span in r.headers["Server-Timing"].split(",")
            )
            timings.append({name: float(ms) for name, _, ms in spans})
    found = out["memories"] + out.get("self_memories", [])
    return [ids[q["store"]].get(m["id"], "?") for m in found]


def recall(ranked: list[str], evidence: list[str], k: int) -> float:
    return len(set(ranked[:k]) & set(evidence)) / len(set(evidence))


def summarize(rows: list[tuple[int, list[str], list[str]]], ks: tuple[int, ...]) -> dict[str, Any]:
    """rows: (category, ranked dia_ids, evidence)."""
    out: dict[str, Any] = {}
    groups: dict[str, list[tuple[int, list[str], list[str]]]] = defaultdict(list)
    for row in rows:
        groups[str(row[0])].append(row)
        if row[0] in (1, 2, 3, 4):
            groups["1-4"].append(row)
    for name, group in sorted(groups.items()):
        out[name] = {"n": len(group)}
        for k in ks:
            out[name][f"R@{k}"] = round(sum(recall(r, e, k) for _, r, e in group) / len(group), 4)
            out[name][f"hit@{k}"] = round(
                sum(bool(set(r[:k]) & set(e)) for _, r, e in group) / len(group), 4
            )
            out[name][f"all@{k}"] = round(
                sum(set(e) <= set(r[:k]) for _, r, e in group) / len(group), 4
            )
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="Tablet 2 only, no verify runs")
    parser.add_argument(
        "--verify-only", action="store_true", help="only verify vs plain; writes no results"
    )
    parser.add_argument("--backend", help="the service's MNEME_EMBEDDING_BACKEND (e.g. onnx-int8)")
    parser.add_argument(
        "--query-int8", choices=("true", "false"), help="the service's MNEME_QUERY_INT8"
    )
    args = parser.parse_args()
    turns = load_turns()
    stores = sorted({t.store for t in turns})[: args.conversations]
    turns = [t for t in turns if t.store in stores]
    queries = load_queries(set(stores))
    results: dict[str, Any] = {
        "machine": machine(),
        "args": vars(args),
        "turns": len(turns),
        "questions": len(queries),
    }
    with tempfile.TemporaryDirectory(prefix="mneme-bench-") as tmp:
        env = {"MNEME_EMBEDDING_BACKEND": args.backend} if args.backend else {}
        if args.query_int8:
            env["MNEME_QUERY_INT8"] = args.query_int8
        server = Server(Path(tmp) / "data", KEY, **env)
        try:
            await server.ready()
            async with aiohttp.ClientSession(headers=HEADERS) as session:
                started = time.perf_counter()
                ids = await ingest(session, server.base, turns)
                await wait_embedded(session, server.base)
                results["ingest_s"] = round(time.perf_counter() - started, 1)
                print(f"ingested {len(turns)} turns in {results['ingest_s']} s", flush=True)

                models: tuple[str, ...] = ("Tablet 2", "Scroll 1.2", "Scroll 1.1")
                if args.quick:
                    models = ("Tablet 2",)
                if args.verify_only:
                    models = ()
                for model in models:
                    rows = []
                    for q in queries:
                        ranked = await ask(
                            session, server.base, q, ids, model=model, max_results=20
                        )
                        rows.append((q["category"], ranked, q["evidence"]))
                    results[model] = summarize(rows, (5, 10, 20))
                    print(model, json.dumps(results[model]["1-4"]), flush=True)

                if not args.verify_only:
                    # The ranking's levers, tuned leave one conversation out.
                    questions = await ranking_folds.fetch(
                        server.database_url(), Path(tmp) / "data", KEY, queries
                    )
                    results["folds"] = ranking_folds.run(questions, ids)
                    for lever, a in results["folds"]["ablation"].items():
                        print(lever, "LOO", a["loo"], "in-sample", a["in_sample"], flush=True)

                # verify = k with 5 results per pass vs plain retrieval of as many results.
                if args.quick:
                    return
                # verify is about questions that need several memories: measured on multi-hop.
                multi_hop = [q for q in queries if q["category"] == 1]
                verify: dict[str, Any] = {}
                for k in range(4):
                    n = 5 * (k + 1)
                    rows_v, rows_p = [], []
                    for q in multi_hop:
                        got = await ask(
                            session, server.base, q, ids, model="Tablet 2", max_results=5, verify=k
                        )
                        rows_v.append((q["category"], got, q["evidence"]))
                        if k:
                            plain = await ask(
                                session, server.base, q, ids, model="Tablet 2", max_results=n
                            )
                            rows_p.append((q["category"], plain, q["evidence"]))
                    verify[str(k)] = {"results": n, "verify": summarize(rows_v, (n,))}
                    if k:
                        verify[str(k)]["plain"] = summarize(rows_p, (n,))
                    print(
                        f"verify={k}", json.dumps(verify[str(k)]["verify"].get("1", {})),
                        "plain", json.dumps(verify[str(k)].get("plain", {}).get("1", {})),
                        flush=True,
                    )  # fmt: skip
                results["verify"] = verify
        finally:
            server.stop()
    if args.verify_only:  # a tuning run: print, keep the committed results
        return
    # The other shape (issue 60): facts about a person, in the same run.
    results["personas"] = await personas.measure()
    print("\n".join(personas.table(results["personas"])), flush=True)
    path = write_results("quality", results)
    (path.parent / "quality.md").write_text(render(results))


def render(r: dict[str, Any]) -> str:
    m = r["machine"]
    lines = [
        "# Retrieval quality on LoCoMo",
        "",
        f"{r['turns']} turns in {r['args']['conversations']} stores, {r['questions']} questions "
        f"with evidence, all through the HTTP API (ingest + embed {r['ingest_s']} s). "
        f"Run {m['date']} on {m['cpu']}, {m['cores']} cores.",
        "",
        "Command: `.venv/bin/python -m bench.quality_bench`",
        "",
        "## Recall by model (max_results 20)",
        "",
        "| model | categories | n | R@5 | R@10 | R@20 |",
        "|---|---|---|---|---|---|",
    ]
    for model in ("Tablet 2", "Scroll 1.2", "Scroll 1.1"):
        for cat in ("1-4", "1", "2", "3", "4", "5"):
            s = r[model].get(cat)
            if s is None:
                continue
            label = cat if cat == "1-4" else f"{cat} {CATEGORIES[int(cat)]}"
            lines.append(
                f"| {model} | {label} | {s['n']} | {s['R@5']} | {s['R@10']} | {s['R@20']} |"
            )
    lines += [
        "",
        "Reference (README of the data): BM25 R@10 0.562 on categories 1-4, 0.264 on multi-hop;",
        "DRAGON (LoCoMo paper) 0.662.",
        "",
        "## verify on multi-hop (category 1), Tablet 2, 5 results per pass",
        "",
        "verify = k returns up to 5 * (k + 1) memories; it is compared with plain retrieval",
        "of the same number of results (max_results = 5 * (k + 1)). The passes' weights",
        "(service.retrieval.verify) are tuned leave one conversation out by bench.recall_lab",
        "(bench/results/issue36-retrieval-levers.md: +0.019 / +0.023 / +0.011 held out).",
        "",
        "| verify | results | R with verify | R plain, same number of results |",
        "|---|---|---|---|",
    ]
    for k, v in r.get("verify", {}).items():
        n = v["results"]
        with_v = v["verify"].get("1", {}).get(f"R@{n}")
        plain = v.get("plain", {}).get("1", {}).get(f"R@{n}", "—")
        lines.append(f"| {k} | {n} | {with_v} | {plain} |")
    if "folds" in r:
        http = r.get("Tablet 2", {}).get("1-4", {}).get("R@10")
        lines += ["", *ranking_folds.render(r["folds"], http)]
    if "personas" in r:
        lines += [
            "",
            "## Facts about a person (shared/data/personas, dev: 12 personas, 240 questions)",
            "",
            "Each persona a store, each question asked of its own store (max_results 10), scored",
            "by the set's score.py; bench.persona_folds tunes the persona levers held out by",
            "persona (bench/results/issue60-persona-folds.md).",
            "",
            *personas.table(r["personas"]),
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    asyncio.run(main())
