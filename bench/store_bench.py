"""Memory Store list benchmark (issue 5): the seed-003 list at 10k and at 1M memories.

One `mneme serve` (embedded PostgreSQL, worker off), one workspace, two stores of
path-addressed memories: 10,000 and 1,000,000, loaded with INSERT … SELECT (paths like
`team07/project0421/notes-000123.md`). The same requests go to both, alternating: the
first page, `after_id` pages, and `path_prefix` pages at two depths. Latency is taken
client-side and server-side (`Server-Timing`).

    .venv/bin/python -m bench.store_bench [--requests 400]
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

from bench.common import Server, machine, summary_ms, write_results

KEY = "bench-bootstrap-key-0123456789abcdef"
BASE = "/api/v1/forward/memory_stores"

LOAD = """
INSERT INTO memories (workspace_id, id, store_id, text, tier, provider_ref, path, metadata,
                      content_sha256, content_size_bytes, embedding_status)
SELECT $1, 'mem_' || $3 || to_char(g, 'FM0000000000'), $2,
       'content of file ' || g, 'core', 'ref-' || $3 || g,
       'team' || to_char(g % 20, 'FM00') || '/project' || to_char((g / 20) % 500, 'FM0000')
           || '/notes-' || to_char(g, 'FM0000000') || '.md',
       jsonb_build_object('owner', 'team' || g % 20),
       md5(g::text), 20, 'ready'
FROM generate_series($4::int + 1, $4::int + $5) AS g
"""


async def setup(url: str, sizes: dict[str, int]) -> dict[str, str]:
    from service.queries import stores as sq

    conn = await asyncpg.connect(url)
    ids = {}
    try:
        ws = await conn.fetchval("SELECT id FROM workspaces WHERE name = 'default'")
        await conn.set_type_codec(
            "jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
        )
        for name, n in sizes.items():
            store = await sq.create_store(conn, ws, name, "", {}, False)
            assert store is not None
            started = time.perf_counter()
            for first in range(0, n, 100_000):
                await conn.execute(LOAD, ws, store.id, name, first, min(100_000, n - first))
            print(f"loaded {n} into {name} in {time.perf_counter() - started:.0f} s", flush=True)
            ids[name] = store.id
        await conn.execute("VACUUM ANALYZE memories")
    finally:
        await conn.close()
    return ids


async def one(session: aiohttp.ClientSession, url: str) -> tuple[float, float, dict[str, Any]]:
    started = time.perf_counter()
    async with session.get(url) as resp:
        body: dict[str, Any] = await resp.json()
        assert resp.status == 200, body
        server_ms = float(resp.headers["Server-Timing"].split("dur=")[1])
    return time.perf_counter() - started, server_ms / 1000, body


async def run(base: str, stores: dict[str, str], requests: int) -> dict[str, Any]:
    rng = random.Random(11)
    kinds = ("plain", "prefix")
    lat: dict[str, dict[str, dict[str, list[float]]]] = {
        s: {k: {"client": [], "server": []} for k in kinds} for s in stores
    }
    last: dict[tuple[str, str], str | None] = {}
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEY}"}) as session:
        for i in range(requests + 40):
            kind = kinds[i % 2]
            team, project = rng.randrange(20), rng.randrange(500)
            prefix = (
                f"team{team:02d}/"
                if rng.random() < 0.5
                else f"team{team:02d}/project{project:04d}/"
            )
            follow = rng.random() < 0.5
            for name, store_id in stores.items():
                query = "limit=20"
                if kind == "prefix":
                    query += f"&path_prefix={prefix}"
                cursor = last.get((name, kind))
                if follow and cursor and kind == "plain":
                    query += f"&after_id={cursor}"
                c, s, body = await one(session, f"{base}{BASE}/{store_id}/memories?{query}")
                last[(name, kind)] = body["last_id"] if body["has_more"] else None
                if i >= 40:
                    lat[name][kind]["client"].append(c)
                    lat[name][kind]["server"].append(s)
    return {
        s: {k: {side: summary_ms(v) for side, v in d.items()} for k, d in per.items()}
        for s, per in lat.items()
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--big", type=int, default=1_000_000)
    args = parser.parse_args()
    sizes = {"small": 10_000, "big": args.big}
    results: dict[str, Any] = {"machine": machine(), "args": vars(args), "sizes": sizes}
    with tempfile.TemporaryDirectory(prefix="mneme-bench-") as tmp:
        server = Server(Path(tmp) / "data", KEY, MNEME_WORKER="off")
        try:
            await server.ready()
            stores = await setup(server.database_url(), sizes)
            results["latency"] = await run(server.base, stores, args.requests)
        finally:
            server.stop()
    lat = results["latency"]
    results["ratio_p50_big_over_small"] = {
        kind: {
            side: round(lat["big"][kind][side]["p50_ms"] / lat["small"][kind][side]["p50_ms"], 3)
            for side in ("client", "server")
        }
        for kind in ("plain", "prefix")
    }
    path = write_results("store_list", results)
    (path.parent / "store_list.md").write_text(render(results))
    print(results["ratio_p50_big_over_small"])


def render(r: dict[str, Any]) -> str:
    m, lat, ratio = r["machine"], r["latency"], r["ratio_p50_big_over_small"]
    lines = [
        "# Memory Store list benchmark",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; Python {m['python']}. "
        f"Run {m['date']}. Client, `mneme serve` and embedded PostgreSQL share these cores.",
        "",
        "Command: `.venv/bin/python -m bench.store_bench`",
        "",
        f"One workspace, two stores of path-addressed memories: {r['sizes']['small']:,} and "
        f"{r['sizes']['big']:,}. {r['args']['requests'] // 2} requests of each kind per store "
        "(after 40 warm-up), alternating stores: `limit=20` first pages and `after_id` pages; "
        "`path_prefix` pages at depth 1 (`team07/`) and 2 (`team07/project0421/`).",
        "",
        "| list | memories | client p50 ms | client p95 ms | server p50 ms | server p95 ms |",
        "|---|---|---|---|---|---|",
    ]
    for kind, label in (("plain", "no prefix"), ("prefix", "path_prefix")):
        for s in ("small", "big"):
            c, sv = lat[s][kind]["client"], lat[s][kind]["server"]
            row = [
                label,
                f"{r['sizes'][s]:,}",
                c["p50_ms"],
                c["p95_ms"],
                sv["p50_ms"],
                sv["p95_ms"],
            ]
            lines.append("| " + " | ".join(str(v) for v in row) + " |")
    lines += [
        "",
        f"p50 ratio 1M / 10k — no prefix: client {ratio['plain']['client']}, server "
        f"{ratio['plain']['server']}; path_prefix: client {ratio['prefix']['client']}, server "
        f"{ratio['prefix']['server']} (target ≤ 1.5).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    asyncio.run(main())
