"""Scaling out on one machine (issue 15): 1 vs 2 API replicas, 1 vs 2 workers.

One embedded PostgreSQL (the first replica's), a second `mneme serve` on the same
database (worker off in both), `mneme worker` processes beside them. Four LoCoMo
conversations are written and embedded first. Then, each for a fixed time with 16
clients: search throughput and single-write throughput against one replica and against
both (clients alternate); and the backlog drain rate of 1 and then 2 workers (a fresh
backlog of 4,000 written-but-unembedded memories each time, claims of 128). Reported as
requests (memories) per second and the 2-vs-1 ratios measured in this run. Every process
shares the same two cores, so the ratios say what a second process buys on this box, not
on a second one.

    .venv/bin/python -m bench.scale_bench
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import (
    ROOT,
    Server,
    free_port,
    load_turns,
    machine,
    wait_embedded,
    wait_ready,
    write_results,
)
from bench.quality_bench import HEADERS, KEY, ingest, load_queries

STORES = ["conv-41", "conv-42", "conv-43", "conv-44"]
CLIENTS = 16
SECONDS = 20.0
BACKLOG = 4000
CLAIM = 128


def spawn(command: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    out = log.open("ab")
    return subprocess.Popen([sys.executable, "-m", "service.cli", command], env=env,
                            stdout=out, stderr=out, cwd=ROOT)  # fmt: skip


async def throughput(bases: list[str], make: Any) -> dict[str, float]:
    """Requests per second over SECONDS with CLIENTS clients alternating over ``bases``;
    ``make(n, i)`` gives (path, body) of client n's i-th request."""
    done, errors = 0, 0
    deadline = time.monotonic() + SECONDS

    async def client(n: int, session: aiohttp.ClientSession) -> None:
        nonlocal done, errors
        i = 0
        while time.monotonic() < deadline:
            path, body = make(n, i)
            async with session.post(f"{bases[(n + i) % len(bases)]}{path}", json=body) as r:
                await r.read()
                done += 1
                errors += r.status >= 500
            i += 1

    started = time.monotonic()
    async with aiohttp.ClientSession(headers=HEADERS) as session:
        await asyncio.gather(*(client(n, session) for n in range(CLIENTS)))
    return {"per_s": round(done / (time.monotonic() - started), 1), "requests": done,
            "5xx": errors}  # fmt: skip


async def drain_rate(base: str, env: dict[str, str], workers: int, log: Path, tag: str) -> float:
    """Memories per second that ``workers`` workers embed from a fresh backlog."""
    async with aiohttp.ClientSession(headers=HEADERS) as session:
        for first in range(0, BACKLOG, 500):
            body = {
                "memories": [
                    {
                        "text": f"Backlog {tag} memory {i}: the tide was high at "
                        f"{i % 24} o'clock and the pier was busy.",
                        "store": "backlog",
                    }
                    for i in range(first, first + 500)
                ]
            }
            async with session.post(f"{base}/api/v1/memories", json=body) as r:
                assert r.status == 200, await r.text()
        # Claims of CLAIM rows, as workers sharing a backlog would take them: the queue
        # shrinks batch by batch, and the clock starts at the first batch stored (the
        # models loaded), for the rest of the backlog.
        procs = [spawn("worker", {**env, "MNEME_EMBED_CLAIM_SIZE": str(CLAIM)}, log)
                 for _ in range(workers)]  # fmt: skip
        try:
            started, start_queue = None, 0
            while True:
                async with session.get(f"{base}/readyz") as r:
                    queue = (await r.json())["embeddingQueue"]
                if started is None and 0 < queue < BACKLOG:
                    started, start_queue = time.monotonic(), queue
                if queue == 0:
                    assert started is not None, "drained within one poll: use a bigger BACKLOG"
                    return round(start_queue / (time.monotonic() - started), 1)
                await asyncio.sleep(0.1)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=60)


async def main() -> None:
    turns = [t for t in load_turns() if t.store in STORES]
    queries = [q["question"] for q in load_queries(set(STORES))]
    results: dict[str, Any] = {"machine": machine(), "clients": CLIENTS, "seconds": SECONDS}
    with tempfile.TemporaryDirectory(prefix="mneme-scale-") as tmp:
        log = Path(tmp) / "log"
        first = Server(Path(tmp) / "data", KEY, log=log, MNEME_WORKER="off")
        procs: list[subprocess.Popen[bytes]] = []
        try:
            await first.ready()
            env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
            env.update(MNEME_DATABASE_URL=first.database_url(), MNEME_BOOTSTRAP_KEY=KEY,
                       MNEME_LOG_LEVEL="WARNING", MNEME_RATE_LIMITS="scale=10000000",
                       MNEME_DATA_DIR=str(Path(tmp) / "data"))  # fmt: skip
            port = free_port()
            procs.append(spawn("serve", {**env, "MNEME_PORT": str(port), "MNEME_WORKER": "off"},
                               log))  # fmt: skip
            second = f"http://127.0.0.1:{port}"
            await wait_ready(second)
            async with aiohttp.ClientSession(headers=HEADERS) as session:
                await ingest(session, first.base, turns)
                async with session.post(f"{first.base}/api/v1/forward/memory_stores",
                                        json={"name": "backlog"}) as r:  # fmt: skip
                    assert r.status == 201
            worker = spawn("worker", env, log)
            async with aiohttp.ClientSession(headers=HEADERS) as session:
                await wait_embedded(session, first.base)
            worker.terminate()
            worker.wait(timeout=60)

            def searching(n: int, i: int) -> tuple[str, dict[str, Any]]:
                q = queries[(n * 977 + i) % len(queries)]
                return "/api/v1/memory/search", {"user_id": STORES[i % 4], "query": q}

            def writing(n: int, i: int) -> tuple[str, dict[str, Any]]:
                return "/api/v1/memories", {"text": f"Client {n} wrote note {i} about the "
                                            "harbour schedule.", "store": "backlog"}  # fmt: skip

            for name, make in (("search", searching), ("write", writing)):
                one = await throughput([first.base], make)
                two = await throughput([first.base, second], make)
                results[name] = {"1 replica": one, "2 replicas": two,
                                 "ratio": round(two["per_s"] / one["per_s"], 2)}  # fmt: skip
                print(name, results[name], flush=True)
            # The writes above are a backlog of their own: drained first, unmeasured.
            worker = spawn("worker", env, log)
            async with aiohttp.ClientSession(headers=HEADERS) as session:
                await wait_embedded(session, first.base)
            worker.terminate()
            worker.wait(timeout=60)
            alone = await drain_rate(first.base, env, 1, log, "a")
            pair = await drain_rate(first.base, env, 2, log, "b")
            results["drain"] = {"1 worker": alone, "2 workers": pair,
                                "ratio": round(pair / alone, 2), "backlog": BACKLOG}  # fmt: skip
            print("drain", results["drain"], flush=True)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=60)
            first.stop()
    write_results("scale", results)
    (ROOT / "bench" / "results" / "scale.md").write_text(render(results))


def render(r: dict[str, Any]) -> str:
    m = r["machine"]
    s, w, d = r["search"], r["write"], r["drain"]
    errors = sum(x[n]["5xx"] for x in (s, w) for n in ("1 replica", "2 replicas"))
    return "\n".join([
        "# Scaling out on one machine (bench.scale_bench)",
        "",
        f"Run {m['date']} on {m['cpu']}, {m['cores']} cores; every process (PostgreSQL, the "
        "replicas, the workers, the client) shares them. Four LoCoMo conversations, "
        f"{r['clients']} clients, {r['seconds']:.0f} s per measurement.",
        "",
        "| what | 1 | 2 | 2 / 1 |",
        "|---|---|---|---|",
        f"| searches/s (API replicas) | {s['1 replica']['per_s']} | {s['2 replicas']['per_s']} "
        f"| {s['ratio']} |",
        f"| single writes/s (API replicas) | {w['1 replica']['per_s']} | "
        f"{w['2 replicas']['per_s']} | {w['ratio']} |",
        f"| memories embedded/s (workers, backlog of {d['backlog']}) | {d['1 worker']} | "
        f"{d['2 workers']} | {d['ratio']} |",
        "",
        f"5xx: {errors}.",
        "",
        "Command: `.venv/bin/python -m bench.scale_bench`",
        "",
    ])  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
