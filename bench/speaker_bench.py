"""Many speakers (issue 59, finding 4): search p50 at 10 and at 10,000 registered speakers.

One `mneme serve` (embedded PostgreSQL, its worker embedding what is written), two stores
of the same shape: the same LoCoMo turns (conv-26, attributed to Caroline and Melanie),
one with 10 registered speakers and one with 10,000 (two-word names, the store's limit).
Every question of conv-26 is asked of both, in a random order each time, through
`POST /api/v1/memory/search` (Tablet 2, which matches the speaker a question names), while
a probe asks `/healthz` every 50 ms: a search that holds the event loop shows there.
The bar: p50 at 10,000 speakers within 1.2x of p50 at 10.

    .venv/bin/python -m bench.speaker_bench [--memories 200] [--queries 50]
        [--before PATH --before-queries 10]   # PATH: another checkout, e.g. `git archive`'d

``--before`` runs the same steps against that checkout's code too (its own server and
data directory), with fewer questions: there, each search at 10,000 speakers takes long.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from bench.common import LOCOMO, ROOT, Server, load_turns, machine, summary_ms, write_results

KEY = "bench-bootstrap-key-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {KEY}"}
CONVERSATION = "conv-26"
SPEAKERS = ("Caroline", "Melanie")  # who speaks in conv-26, registered in both stores
STORES = {"few": 10, "many": 10_000}
# 100 given names x 100 family names: 10,000 names of two words, none of them LoCoMo's.
_GIVEN = [a + b for a in ("Al", "Be", "Ca", "Do", "El", "Fa", "Gi", "Ho", "Iv", "Jo")
          for b in ("ra", "ne", "lo", "mi", "sa", "to", "vi", "da", "ko", "ri")]  # fmt: skip
_FAMILY = [a + b for a in ("Ash", "Brook", "Cole", "Dale", "East", "Fair", "Glen", "Hart",
                           "Ives", "Kent") for b in ("by", "ford", "ham", "ley", "more", "ton",
                                                     "well", "wood", "worth", "field")]  # fmt: skip
NAMES = [f"{g} {f}" for g in _GIVEN for f in _FAMILY]


async def register(server: Server, http: aiohttp.ClientSession, store: str, count: int) -> None:
    """Register ``count`` speakers, LoCoMo's two through the API, the rest in one statement
    (the same rows and triggers; one by one over HTTP, 10,000 take minutes here)."""
    for name in SPEAKERS:
        async with http.post(
            f"{server.base}/api/v1/stores/{store}/speakers", json={"name": name}
        ) as resp:
            assert resp.status == 201, await resp.text()
    conn = await asyncpg.connect(server.database_url())
    try:
        await conn.execute(
            """INSERT INTO speakers (workspace_id, store_id, name)
               SELECT workspace_id, id, unnest($2::text[]) FROM stores WHERE name = $1""",
            store,
            NAMES[: count - len(SPEAKERS)],
        )
    finally:
        await conn.close()


async def populate(server: Server, http: aiohttp.ClientSession, memories: int) -> None:
    """Both stores, their speakers and the same memories."""
    turns = [t for t in load_turns() if t.store == CONVERSATION][:memories]
    base = server.base
    for store, count in STORES.items():
        body = {"name": store, "description": f"{count} speakers"}
        async with http.post(f"{base}/api/v1/forward/memory_stores", json=body) as resp:
            assert resp.status == 201, await resp.text()
        await register(server, http, store, count)
        for at in range(0, len(turns), 100):
            batch = [{"text": t.text, "speaker": t.speaker, "store": store}
                     for t in turns[at : at + 100]]  # fmt: skip
            async with http.post(f"{base}/api/v1/memories", json={"memories": batch}) as resp:
                assert resp.status == 200, await resp.text()


async def embedded(http: aiohttp.ClientSession, base: str, within_s: float = 300) -> None:
    """Until the worker has embedded every memory written."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        async with http.get(f"{base}/readyz") as resp:
            if resp.status == 200 and (await resp.json())["embeddingQueue"] == 0:
                return
        await asyncio.sleep(0.5)
    raise TimeoutError("the worker did not embed the memories")


async def probe(http: aiohttp.ClientSession, base: str, out: list[float]) -> None:
    """``/healthz`` every 50 ms until cancelled: how long each took."""
    while True:
        started = time.perf_counter()
        async with http.get(f"{base}/healthz") as resp:
            await resp.read()
        out.append(time.perf_counter() - started)
        await asyncio.sleep(0.05)


async def searches(
    http: aiohttp.ClientSession, base: str, questions: list[str], seed: int = 59
) -> dict[str, list[float]]:
    """Each question of both stores, in a random order each time; seconds per search
    (``healthz``: the probe's), and the service's own (``STORE/app``, ``STORE/store``…:
    its Server-Timing spans)."""
    rng = random.Random(seed)
    took: dict[str, list[float]] = {store: [] for store in STORES}
    took["healthz"] = []

    async def ask(store: str, question: str) -> float:
        body = {"user_id": store, "query": question}
        started = time.perf_counter()
        async with http.post(f"{base}/api/v1/memory/search", json=body) as resp:
            assert resp.status == 200, await resp.text()
            await resp.read()
            spans = resp.headers.get("Server-Timing", "")
        elapsed = time.perf_counter() - started
        for span in filter(None, (s.strip() for s in spans.split(","))):
            name, _, ms = span.partition(";dur=")
            took.setdefault(f"{store}/{name}", []).append(float(ms) / 1000)
        return elapsed

    for question in questions[:3]:  # warm: the model, the snapshots, the speaker matchers
        for store in STORES:
            await ask(store, question)
    took = {key: [] for key in took}  # the warm-up's spans left out
    prober = asyncio.ensure_future(probe(http, base, took["healthz"]))
    try:
        for question in questions:
            order = list(STORES)
            rng.shuffle(order)
            for store in order:
                took[store].append(await ask(store, question))
    finally:
        prober.cancel()
    return took


async def run(root: Path, memories: int, queries: int) -> dict[str, Any]:
    with (LOCOMO / "queries.jsonl").open() as f:
        lines = [json.loads(line) for line in f]
    questions = [q["question"] for q in lines if q["store"] == CONVERSATION][:queries]
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp), KEY, root=root)
        try:
            await server.ready()
            async with aiohttp.ClientSession(headers=HEADERS) as http:
                await populate(server, http, memories)
                await embedded(http, server.base)
                took = await searches(http, server.base, questions)
        finally:
            server.stop()
    out: dict[str, Any] = {"memories": memories, "questions": len(questions)}
    out["search_ms"] = {store: summary_ms(took[store]) for store in STORES}
    out["server_timing_p50_ms"] = {
        key: summary_ms(spans)["p50_ms"] for key, spans in took.items() if "/" in key and spans
    }
    healthz = took["healthz"]
    out["healthz_ms"] = summary_ms(healthz) | {"max_ms": round(max(healthz) * 1000, 1)}
    out["p50_many_to_few"] = round(
        out["search_ms"]["many"]["p50_ms"] / out["search_ms"]["few"]["p50_ms"], 3
    )
    return out


def markdown(results: dict[str, Any], command: str) -> str:
    m = results["machine"]
    lines = [
        "# Issue 59, finding 4: search with many speakers", "",
        f"Machine: {m['cpu']}, {m['cores']} cores (`nproc`), {m['memory_gib']} GiB, "
        f"Python {m['python']}, {m['date']}. Shared machine: absolute times drift; the "
        "ratio is measured within one run (questions interleaved between the stores).", "",
        f"Command: `{command}`", "",
        "Search p50 through `POST /api/v1/memory/search` (Tablet 2), the same "
        f"{results['after']['memories']} memories in each store, each question asked of both:",
        "", "| code | questions | p50 at 10 speakers | p50 at 10,000 | ratio (bar: 1.2) "
        "| p95 at 10 | p95 at 10,000 | /healthz p50 / max meanwhile |",
        "|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for side in ("before", "after"):
        if side not in results:
            continue
        r = results[side]
        few, many = r["search_ms"]["few"], r["search_ms"]["many"]
        lines.append(
            f"| {side} | {r['questions']} | {few['p50_ms']:.1f} ms | {many['p50_ms']:.1f} ms "
            f"| {r['p50_many_to_few']:.2f}x | {few['p95_ms']:.1f} ms | {many['p95_ms']:.1f} ms "
            f"| {r['healthz_ms']['p50_ms']:.1f} / {r['healthz_ms']['max_ms']:.1f} ms |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=200)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--before", type=Path, help="another checkout to run as well")
    parser.add_argument("--before-queries", type=int, default=10)
    parser.add_argument("--name", default="issue59-speakers")
    args = parser.parse_args()
    results: dict[str, Any] = {"machine": machine()}
    if args.before is not None:
        results["before"] = asyncio.run(run(args.before, args.memories, args.before_queries))
    results["after"] = asyncio.run(run(ROOT, args.memories, args.queries))
    print(json.dumps(results, indent=2))
    print(write_results(args.name, results))
    command = "python -m bench.speaker_bench " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None
    )
    (ROOT / "bench" / "results" / f"{args.name}.md").write_text(markdown(results, command))


if __name__ == "__main__":
    main()
