"""Webhooks (issue 48): what the outbox costs a write, and how fast deliveries go out.

One `mneme serve` (embedded PostgreSQL, worker off), LoCoMo turns written through the
API, alternating without a webhook, with one that never fires and with one subscribed to
every event, round by round (A B C A B C …, so the table's growth and drift on a shared
machine fall on each alike): the write's acknowledgement time, single memories and
100-memory batches. With the webhook, a receiver on loopback (this process, answering 204
at once) notes when each memory.created arrives: the delay from a single write's
acknowledgement to its delivery, and the rate a burst of batches is delivered at.

    .venv/bin/python -m bench.webhook_bench [--singles 25] [--batches 1]  # one round's writes
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench.common import Server, free_port, load_turns, machine, summary_ms, write_results

KEY = "bench-bootstrap-key-0123456789abcdef"
# What each round's webhook subscribes to: none at all; memory.embedded only, which never
# fires with the worker off (the triggers' own checks); every event, sent meanwhile.
MODES: dict[str, list[str]] = {
    "none": [],
    "quiet": ["memory.embedded"],
    "webhook": ["memory.created", "memory.updated", "memory.deleted", "memory.embedded"],
}
CYCLES = 12
HEADERS = {"Authorization": f"Bearer {KEY}"}


class Receiver:
    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}  # memory id -> perf_counter of its memory.created

    async def hook(self, request: web.Request) -> web.Response:
        event = json.loads(await request.read())
        if event["type"] == "memory.created":
            self.arrived.setdefault(event["data"]["memory"]["id"], time.perf_counter())
        return web.Response(status=204)


async def writes(
    http: aiohttp.ClientSession, base: str, texts: list[str], singles: int, batches: int
) -> dict[str, Any]:
    """Acknowledgement times; the ids and ack instants of the singles and the batches."""
    single_s, batch_s, acked = [], [], {}
    for text in texts[:singles]:
        started = time.perf_counter()
        async with http.post(f"{base}/api/v1/memories", json={"text": text}) as resp:
            assert resp.status == 201, await resp.text()
            acked[(await resp.json())["id"]] = time.perf_counter()
        single_s.append(acked[next(reversed(acked))] - started)
    batch_ids: list[str] = []
    rest = texts[singles:]
    for b in range(batches):
        body = {"memories": [{"text": t} for t in rest[b * 100 : (b + 1) * 100]]}
        started = time.perf_counter()
        async with http.post(f"{base}/api/v1/memories", json=body) as resp:
            assert resp.status == 200, await resp.text()
            batch_ids += [m["id"] for m in (await resp.json())["memories"]]
        batch_s.append(time.perf_counter() - started)
    return {"single_s": single_s, "batch_s": batch_s, "acked": acked, "batch_ids": batch_ids,
            "last_ack": time.perf_counter()}  # fmt: skip


async def delivered(receiver: Receiver, ids: list[str], within_s: float = 300) -> float:
    deadline = time.monotonic() + within_s
    while any(i not in receiver.arrived for i in ids):
        assert time.monotonic() < deadline, "deliveries did not all arrive"
        await asyncio.sleep(0.01)
    return max(receiver.arrived[i] for i in ids)


async def run(singles: int, batches: int) -> dict[str, Any]:
    per_round = singles + 100 * batches
    # Numbered: a repeated turn ("Thanks!") would be a duplicate, answered with the
    # memory written before (no new memory.created).
    texts = [f"{t.text} ({n})" for n, t in enumerate(load_turns(CYCLES * len(MODES) * per_round))]
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/hook", receiver.hook)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    out: dict[str, Any] = {m: {"single_s": [], "batch_s": []} for m in MODES}
    out.update(delivery_after_ack_s=[], burst_events_per_s=[])
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp), KEY, MNEME_WORKER="off", MNEME_WEBHOOK_ALLOW_PRIVATE="true")
        try:
            await server.ready()
            async with aiohttp.ClientSession(headers=HEADERS) as http:
                # Interleaved finely: writes slow down as the table grows (worker off), so
                # each mode's share is spread over the whole run.
                for r, mode in enumerate(list(MODES) * CYCLES):
                    hook_id = None
                    if MODES[mode]:
                        body = {"url": f"http://127.0.0.1:{port}/hook", "events": MODES[mode]}
                        async with http.post(f"{server.base}/api/v1/webhooks", json=body) as resp:
                            assert resp.status == 201, await resp.text()
                            hook_id = (await resp.json())["id"]
                    got = await writes(http, server.base, texts[r * per_round :], singles, batches)
                    out[mode]["single_s"] += got["single_s"]
                    out[mode]["batch_s"] += got["batch_s"]
                    if mode == "webhook":
                        last = await delivered(receiver, got["batch_ids"])
                        await delivered(receiver, list(got["acked"]))
                        out["delivery_after_ack_s"] += [
                            receiver.arrived[i] - at for i, at in got["acked"].items()
                        ]
                        out["burst_events_per_s"].append(
                            len(got["batch_ids"]) / (last - got["last_ack"] + 1e-9)
                        )
                    if hook_id is not None:
                        async with http.delete(f"{server.base}/api/v1/webhooks/{hook_id}") as resp:
                            assert resp.status == 204
        finally:
            server.stop()
            await runner.cleanup()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--singles", type=int, default=25)
    parser.add_argument("--batches", type=int, default=1)
    args = parser.parse_args()
    raw = asyncio.run(run(args.singles, args.batches))
    results = {
        "machine": machine(),
        "singles_per_round": args.singles, "batches_per_round": args.batches,
        "write_single_ms": {m: summary_ms(raw[m]["single_s"]) for m in MODES},
        "write_batch100_ms": {m: summary_ms(raw[m]["batch_s"]) for m in MODES},
        "delivery_after_ack_ms": summary_ms(raw["delivery_after_ack_s"]),
        # A batch's 100 events, from its acknowledgement to the last one's arrival: short
        # bursts, so the 0.25 s poll weighs on each; the median says more than any one.
        "batch_delivery_events_per_s": {
            "median": round(statistics.median(raw["burst_events_per_s"]), 1),
            "rounds": [round(x, 1) for x in raw["burst_events_per_s"]],
        },
    }  # fmt: skip
    for what in ("write_single_ms", "write_batch100_ms"):
        none = results[what]["none"]["p50_ms"]
        for m in ("quiet", "webhook"):
            results[what][f"{m}_to_none_p50"] = round(results[what][m]["p50_ms"] / none, 3)
    print(json.dumps(results, indent=2))
    print(write_results("issue48-webhooks", results))


if __name__ == "__main__":
    main()
