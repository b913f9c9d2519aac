"""Mneme against mem0 2.2.1, side by side: same data, same MiniLM weights, same machine,
same PostgreSQL.

mem0 runs as its users run it, in the benchmark's process: `Memory.from_config` with its
pgvector store on the embedded PostgreSQL that `mneme serve` started, its HuggingFace
embedder pointed at the bundled MiniLM directory, `add(..., infer=False)` (no LLM is
called; OPENAI_API_KEY is a dummy) and telemetry off. mem0 is given what Mneme embeds,
"speaker: text", so both sides see the same words. Mneme is a real `mneme serve` (worker
on) reached over HTTP.

Each turn of the chosen conversations is written to both sides, then each question is
asked of both (once by default: a question asked again would be answered from Mneme's
cache of query vectors, which mem0 does not have), one side after the other in a random
order per operation (interleaved, so a slow spell of the machine hits both alike).
Reported: write acknowledgement and search latency per side, their ratios, and
recall@10 (categories 1-4) per side.

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python -m bench.mem0_bench [--stores conv-41,conv-42,conv-43,conv-44] [--rounds 1]
    .venv/bin/python -m bench.mem0_bench --personas   # recall on the persona shape
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from bench import personas
from bench.common import Server, load_turns, machine, summary_ms, wait_embedded, write_results
from bench.quality_bench import ask, load_queries, recall, turn_text

KEY = "bench-bootstrap-key-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {KEY}"}
DEFAULT_STORES = "conv-41,conv-42,conv-43,conv-44"


class Mem0:
    """mem0's open-source ``Memory`` on the service's PostgreSQL."""

    def __init__(self, database_url: str, tmp: Path) -> None:
        os.environ.update(MEM0_TELEMETRY="False", OPENAI_API_KEY="sk-not-used", HF_HUB_OFFLINE="1")
        from mem0 import Memory

        from embeddings.model import bundled_model_path

        self.memory = Memory.from_config({
            "vector_store": {"provider": "pgvector", "config": {
                "connection_string": database_url, "collection_name": "mem0_bench",
                "embedding_model_dims": 384,
            }},
            "embedder": {"provider": "huggingface", "config": {
                "model": str(bundled_model_path()), "embedding_dims": 384,
            }},
            "history_db_path": str(tmp / "mem0-history.db"),
        })  # fmt: skip
        self.dia_ids: dict[str, str] = {}

    def add(self, store: str, content: str, dia_id: str) -> None:
        out = self.memory.add(
            [{"role": "user", "content": content}],
            user_id=store, infer=False, metadata={"dia_id": dia_id},
        )  # fmt: skip
        assert len(out["results"]) == 1, out

    def note(self, store: str, text: str, ref: str) -> str:
        """One fact, as written (no LLM): mem0's id for it."""
        out = self.memory.add(
            [{"role": "user", "content": text}], user_id=store, infer=False,
            metadata={"dia_id": ref},
        )  # fmt: skip
        [added] = out["results"]
        return str(added["id"])

    def replace(self, memory_id: str, text: str, ref: str) -> None:
        """An update, as mem0 takes one: the old memory's text replaced."""
        self.memory.update(memory_id, text, metadata={"dia_id": ref})

    def search(self, store: str, question: str, k: int) -> list[str]:
        # threshold 0: every hit counts, as Mneme returns max_results whatever their score.
        out = self.memory.search(question, top_k=k, filters={"user_id": store}, threshold=0.0)
        return [hit["metadata"]["dia_id"] for hit in out["results"]]


async def mneme_add(session: aiohttp.ClientSession, base: str, turn: Any) -> str:
    body = {"text": turn_text(turn.text, turn.image_caption), "store": turn.store,
            "speaker": turn.speaker, "eventDate": turn.timestamp,
            "providerRef": turn.dia_id}  # fmt: skip
    async with session.post(f"{base}/api/v1/memories", json=body) as r:
        out = await r.json()
        assert r.status == 201, out
    return str(out["id"])


# A pause before each timed operation, so each one starts on a quiet machine: torch's
# OpenMP threads (mem0 encodes in this process) keep spinning for a while after a call
# returns, and whichever side ran next paid for it. Agents call a memory service between
# model turns, not back to back.
GAP_S = 0.02


async def timed(seconds: list[float], coro: Any) -> Any:
    await asyncio.sleep(GAP_S)
    started = time.perf_counter()
    result = await coro
    seconds.append(time.perf_counter() - started)
    return result


async def timed_sync(seconds: list[float], fn: Any, *args: Any) -> Any:
    await asyncio.sleep(GAP_S)
    started = time.perf_counter()
    result = fn(*args)
    seconds.append(time.perf_counter() - started)
    return result


@contextlib.asynccontextmanager
async def both_sides(
    prefix: str,
) -> AsyncIterator[tuple[Server, Mem0, aiohttp.ClientSession]]:
    """A fresh ``mneme serve`` (worker on), mem0 on its PostgreSQL, and a client session."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        server = Server(Path(tmp) / "data", KEY, MNEME_WORKER="on")
        try:
            await server.ready()
            async with aiohttp.ClientSession(headers=HEADERS) as session:
                yield server, Mem0(server.database_url(), Path(tmp)), session
        finally:
            server.stop()


async def run(stores: list[str], rounds: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    turns = [t for t in load_turns() if t.store in stores]
    queries = [q for q in load_queries(set(stores)) if q["category"] in (1, 2, 3, 4)]
    results: dict[str, Any] = {
        "machine": machine(), "stores": stores, "turns": len(turns), "questions": len(queries),
        "rounds": rounds, "seed": seed,
    }  # fmt: skip
    async with both_sides("mneme-mem0-") as (server, mem0, session):
        base = server.base
        for store in stores:
            async with session.post(
                f"{base}/api/v1/forward/memory_stores", json={"name": store}
            ) as r:
                assert r.status == 201, await r.text()
            for speaker in sorted({t.speaker for t in turns if t.store == store}):
                url = f"{base}/api/v1/stores/{store}/speakers"
                async with session.post(url, json={"name": speaker}) as r:
                    assert r.status == 201, await r.text()

        print(f"writing {len(turns)} turns to both…", flush=True)
        ids: dict[str, dict[str, str]] = {s: {} for s in stores}
        writes: dict[str, list[float]] = {"mneme": [], "mem0": []}
        for t in turns:
            content = f"{t.speaker}: {turn_text(t.text, t.image_caption)}"
            for side in rng.sample(["mneme", "mem0"], 2):
                if side == "mneme":
                    mid = await timed(writes["mneme"], mneme_add(session, base, t))
                    ids[t.store][mid] = t.dia_id
                else:
                    await timed_sync(writes["mem0"], mem0.add, t.store, content, t.dia_id)
        await wait_embedded(session, base)

        print(f"asking {len(queries)} questions x {rounds} of both…", flush=True)
        searches: dict[str, list[float]] = {"mneme": [], "mem0": []}
        timings: list[dict[str, float]] = []
        ranked: dict[str, dict[str, list[str]]] = {"mneme": {}, "mem0": {}}
        for q in queries[:20]:  # warm-up, both sides alike
            await ask(session, base, q, ids, model="Tablet 2", max_results=10)
            mem0.search(q["store"], q["question"], 10)
        for _ in range(rounds):
            for q in rng.sample(queries, len(queries)):
                for side in rng.sample(["mneme", "mem0"], 2):
                    if side == "mneme":
                        found = await timed(searches["mneme"], ask(
                            session, base, q, ids, model="Tablet 2", max_results=10,
                            timings=timings,
                        ))  # fmt: skip
                    else:
                        found = await timed_sync(
                            searches["mem0"], mem0.search, q["store"], q["question"], 10
                        )
                    ranked[side][q["qid"]] = found

    for side in ("mneme", "mem0"):
        results[side] = {
            "write": summary_ms(writes[side]),
            "search": summary_ms(searches[side]),
            "recall_at_10": round(
                sum(recall(ranked[side][q["qid"]], q["evidence"], 10) for q in queries)
                / len(queries), 4,
            ),
        }  # fmt: skip
    results["mneme"]["search_in_service"] = summary_ms([t["app"] / 1000 for t in timings])
    results["mneme"]["search_phases_p50_ms"] = {
        name: round(statistics.median(t.get(name, 0.0) for t in timings), 3)
        for name in dict.fromkeys(n for t in timings for n in t if n != "app")
    }
    m, z = results["mneme"], results["mem0"]
    results["ratios"] = {
        "search_p50": round(m["search"]["p50_ms"] / z["search"]["p50_ms"], 3),
        "search_p95": round(m["search"]["p95_ms"] / z["search"]["p95_ms"], 3),
        "write_p50": round(m["write"]["p50_ms"] / z["write"]["p50_ms"], 3),
    }
    return results


async def run_personas() -> dict[str, Any]:
    """The dev personas written to both (an update: Mneme's ``supersedes``, mem0's
    ``update`` of the old memory), every question asked of both; score.py's figures."""
    async with both_sides("mneme-mem0-personas-") as (server, mem0, session):
        ids = await personas.ingest(session, server.base)
        await wait_embedded(session, server.base)
        theirs: dict[str, str] = {}  # the set's id -> mem0's
        for m in personas.load("memories.jsonl"):
            if m.get("supersedes"):
                theirs[m["id"]] = theirs[m["supersedes"]]
                mem0.replace(theirs[m["id"]], m["text"], m["id"])
            else:
                theirs[m["id"]] = mem0.note(m["store"], m["text"], m["id"])
        mneme = await personas.ask_all(session, server.base, ids, "Tablet 2")
        questions = personas.load("queries.jsonl")
        found = {q["qid"]: mem0.search(q["store"], q["question"], 10) for q in questions}
    return {"machine": machine(), "mneme": personas.score(mneme), "mem0": personas.score(found)}


def render(r: dict[str, Any]) -> str:
    m, z, ratio, mach = r["mneme"], r["mem0"], r["ratios"], r["machine"]
    lines = [
        "# Mneme vs mem0 2.2.1, side by side",
        "",
        f"Machine: {mach['cpu']}, {mach['cores']} cores, {mach['memory_gib']} GiB; Python "
        f"{mach['python']}, torch {mach['torch']}. Run {mach['date']}.",
        "Benchmark client, mem0 (in the client's process), `mneme serve` (worker on) and "
        "the one embedded PostgreSQL share these cores.",
        "",
        f"Data: LoCoMo {', '.join(r['stores'])}: {r['turns']} turns written to both, "
        f"{r['questions']} questions (categories 1-4) asked of both {r['rounds']} times, "
        "the two sides interleaved in a random order per operation (seed "
        f'{r["seed"]}). Same MiniLM weights; mem0 `add(infer=False)` of "speaker: text", '
        "its pgvector store (HNSW) on the same PostgreSQL; Mneme through its HTTP API "
        "(Tablet 2, max_results 10).",
        "",
        "| | Mneme p50 ms | p95 ms | p99 ms | mem0 p50 ms | p95 ms | p99 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, key in (("write acknowledged", "write"), ("search", "search")):
        a, b = m[key], z[key]
        lines.append(
            f"| {label} | {a['p50_ms']} | {a['p95_ms']} | {a['p99_ms']} "
            f"| {b['p50_ms']} | {b['p95_ms']} | {b['p99_ms']} |"
        )
    lines += [
        "",
        f"Search p50 Mneme / mem0: **{ratio['search_p50']}**; p95: **{ratio['search_p95']}** "
        "(target ≤ 0.5 each).",
        f"Write acknowledgement p50 Mneme / mem0: **{ratio['write_p50']}** (target ≤ 0.2). "
        "Mneme acknowledges once the write is committed and embeds it afterwards (the "
        "worker); mem0 embeds before it returns.",
        f"Recall@10 (categories 1-4): Mneme **{m['recall_at_10']}**, mem0 **{z['recall_at_10']}**.",
        f"Of Mneme's search, inside the service (`Server-Timing`): p50 "
        f"{m['search_in_service']['p50_ms']} ms, p95 {m['search_in_service']['p95_ms']} ms; "
        "the rest is HTTP and the client. Its phases, p50 ms each: "
        + ", ".join(f"{k} {v}" for k, v in m["search_phases_p50_ms"].items())
        + ".",
        "",
        "Command: `.venv/bin/python -m bench.mem0_bench` (or `python -m bench`).",
        "",
    ]
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stores", default=DEFAULT_STORES, help="LoCoMo conversations")
    parser.add_argument("--rounds", type=int, default=1, help="times each question is asked")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument(
        "--personas", action="store_true", help="recall on the dev personas instead (issue 60)"
    )
    args = parser.parse_args()
    if args.personas:
        side = await run_personas()
        path = write_results("mem0-personas", side)
        table = personas.table({"Mneme (Tablet 2)": side["mneme"], "mem0 2.2.1": side["mem0"]})
        mach = side["machine"]
        path.with_suffix(".md").write_text(
            "# Mneme vs mem0 on the dev personas (`bench.mem0_bench --personas`)\n\n"
            f"Run {mach['date']} on {mach['cpu']}, {mach['cores']} cores; one run, both "
            "sides on the same embedded PostgreSQL and MiniLM weights; mem0 `infer=False`, an "
            "update replaces the old memory's text (`Memory.update`).\n\n" + "\n".join(table) + "\n"
        )
        print("\n".join(table))
        return
    results = await run(args.stores.split(","), args.rounds, args.seed)
    path = write_results("mem0", results)
    (path.parent / "mem0.md").write_text(render(results))
    print(render(results))


if __name__ == "__main__":
    asyncio.run(main())
