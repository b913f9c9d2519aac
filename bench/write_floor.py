"""A single write's acknowledgement against its floor (issue 45), in one interleaved run.

Against one `mneme serve` (embedded PostgreSQL, worker off), alternately: a single-memory
``POST /api/v1/memories`` (no speaker, no providerRef: the plain write an agent sends
each turn) and the same write as one bare asyncpg transaction on a connection of its own
(the memory's row and its version row, the schema's triggers firing as for any write;
no key check, no rate-limit row, no dedupe lock). Both commit with
``synchronous_commit`` on before they count as done. Reported: p50/p95 of each and the
HTTP ack's p50 as a multiple of the floor's.

    .venv/bin/python -m bench.write_floor [--writes 400]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from bench.common import Server, load_turns, machine, summary_ms, write_results
from service.ids import new_id

KEY = "bench-bootstrap-key-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {KEY}"}
BARE_ROW = """
INSERT INTO memories (workspace_id, id, store_id, provider_ref, text, content_sha256,
                      content_size_bytes)
VALUES ($1, $2, $3, $2, $4, $5, $6)
"""
BARE_VERSION = """
INSERT INTO memory_versions (workspace_id, id, memory_id, operation, actor, text, metadata,
                             content_sha256, path, status, scope)
VALUES ($1, $2, $3, 'created', $4, $5, '{}'::jsonb, $6, NULL, 'active', 'workspace')
"""


async def bare_write(conn: asyncpg.Connection, ws: str, store: str, text: str) -> None:
    raw = text.encode()
    digest, memory_id = hashlib.sha256(raw).hexdigest(), new_id("mem")
    async with conn.transaction():
        await conn.execute(BARE_ROW, ws, memory_id, store, text, digest, len(raw))
        await conn.execute(BARE_VERSION, ws, new_id("memver"), memory_id, "bench", text, digest)


async def run(server: Server, texts: list[str]) -> dict[str, Any]:
    conn = await asyncpg.connect(server.database_url())
    http: list[float] = []
    bare: list[float] = []
    try:
        ws, store = await conn.fetchrow(
            "SELECT s.workspace_id, s.id FROM stores s JOIN workspaces w ON w.id = s.workspace_id"
            " WHERE w.name = 'default' AND s.name = 'default'"
        )  # fmt: skip
        async with aiohttp.ClientSession(headers=HEADERS) as session:
            for i, text in enumerate(texts):
                started = time.perf_counter()
                body = {"text": f"{text} (http {i})", "store": "default"}
                async with session.post(f"{server.base}/api/v1/memories", json=body) as resp:
                    assert resp.status == 201, await resp.text()
                    await resp.read()
                http.append(time.perf_counter() - started)
                started = time.perf_counter()
                await bare_write(conn, ws, store, f"{text} (bare {i})")
                bare.append(time.perf_counter() - started)
                await asyncio.sleep(0.005)  # as mem0_bench paces its writes
    finally:
        await conn.close()
    warm = 20  # the first writes plan statements and fill caches on both sides
    ack, floor = summary_ms(http[warm:]), summary_ms(bare[warm:])
    ratio = round(ack["p50_ms"] / floor["p50_ms"], 3)
    return {"http_ack": ack, "bare_transaction": floor, "ratio_p50": ratio}


def render(results: dict[str, Any]) -> str:
    r = results["result"]
    m = results["machine"]
    return "\n".join([
        "# A single write's acknowledgement against its floor",
        "",
        f"Machine: {m.get('cpu', 'unknown')}, {m.get('cores', '?')} cores; "
        f"{results['writes']} writes of each kind, interleaved (the first 20 of each left out).",
        "",
        "| write | p50 ms | p95 ms |",
        "|---|---|---|",
        f"| HTTP ack (POST /api/v1/memories) | {r['http_ack']['p50_ms']} | "
        f"{r['http_ack']['p95_ms']} |",
        f"| bare asyncpg transaction (row + version row) | {r['bare_transaction']['p50_ms']} | "
        f"{r['bare_transaction']['p95_ms']} |",
        "",
        f"HTTP ack / floor, p50: **{r['ratio_p50']}** (issue 45's target: at most 2.5).",
        "",
        "Command: `.venv/bin/python -m bench.write_floor`",
        "",
    ])  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writes", type=int, default=400)
    args = parser.parse_args()
    texts = [t.text for t in load_turns()][: args.writes]
    with tempfile.TemporaryDirectory(prefix="mneme-bench-") as tmp:
        server = Server(Path(tmp) / "data", KEY, MNEME_WORKER="off")
        try:
            await server.ready()
            result = await run(server, texts)
        finally:
            server.stop()
    results = {"machine": machine(), "writes": len(texts), "result": result}
    path = write_results("write_floor", results)
    (path.parent / "write_floor.md").write_text(render(results))
    print(render(results))


if __name__ == "__main__":
    asyncio.run(main())
