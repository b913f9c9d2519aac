"""Browse benchmark (issue 4): `GET /api/v1/memories` at 10k and at 1M memories, one run.

Two workspaces in one `mneme serve` (embedded PostgreSQL, worker off): one holds 10,000
memories, the other 1,000,000, loaded with one INSERT … SELECT each (LoCoMo turns as
texts; a mix of scopes, tiers and fact types; one creation second apart). The same
request mix is sent to both, alternating: first pages and cursor pages, with and
without filters, as a service key and as a personal key. Latency is taken client-side
and server-side (the `Server-Timing` header: time inside the service).

    .venv/bin/python -m bench.browse_bench [--requests 400]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from bench.common import Server, load_turns, machine, summary_ms, write_results

KEY = "bench-bootstrap-key-0123456789abcdef"

LOAD = """
INSERT INTO memories (workspace_id, id, store_id, text, scope, tier, fact_type, provider,
                      provider_ref, content_sha256, content_size_bytes, first_seen_at,
                      last_used_at, created_at, updated_at, embedding_status)
SELECT $1, 'mem_' || to_char(g, 'FM0000000000') || $5, $2,
       ($3::text[])[1 + g % cardinality($3::text[])],
       CASE WHEN g % 10 = 0 THEN 'room:eng' WHEN g % 10 = 1 THEN 'pair:bob:bot'
            ELSE 'workspace' END,
       CASE WHEN g % 4 = 0 THEN 'core' ELSE 'hindsight' END,
       (ARRAY['world', 'experience', 'observation', NULL])[1 + g % 4],
       CASE WHEN g % 3 = 0 THEN 'hermes-core' ELSE 'hindsight' END,
       'ref-' || g, md5(g::text), 64,
       ts, ts + make_interval(secs => ((g::bigint * 7919) % 86400)::int), ts, ts, 'ready'
FROM generate_series($6::int + 1, $6::int + $4) AS g,
     LATERAL (SELECT timestamptz '2024-01-01' + make_interval(secs => g)) AS t(ts)
"""

MIX = [
    "",
    "limit=50",
    "tier=core",
    "factType=world,experience",
    "notFactType=observation&status=active,archived",
    "search=support",
    "scope=room:eng&limit=100",
]


async def setup(url: str, sizes: dict[str, int], texts: list[str]) -> dict[str, dict[str, str]]:
    """Workspaces with their memories and keys; returns each one's service/personal keys."""
    from service.queries import keys, tenancy

    conn = await asyncpg.connect(url)
    out = {}
    try:
        for name, n in sizes.items():
            ws = await tenancy.create_workspace(conn, name, "scale")
            assert ws is not None
            store = await conn.fetchval("SELECT id FROM stores WHERE workspace_id = $1", ws.id)
            started = time.perf_counter()
            for first in range(0, n, 100_000):  # in slices, to keep each statement short
                count = min(100_000, n - first)
                await conn.execute(LOAD, ws.id, store, texts, count, f"_{name}", first)
            print(f"loaded {n} into {name} in {time.perf_counter() - started:.0f} s", flush=True)
            await tenancy.create_member(conn, ws.id, "alice", "human", None)
            await tenancy.create_room(conn, ws.id, "eng", ["alice"])
            _, service_key = await keys.create_key(
                conn, ws.id, kind="service", member=None, scopes=["memory:read"], name=None
            )
            _, personal_key = await keys.create_key(
                conn, ws.id, kind="personal", member="alice", scopes=["memory:read"], name=None
            )
            out[name] = {"service": service_key, "personal": personal_key}
        await conn.execute("VACUUM ANALYZE memories")
    finally:
        await conn.close()
    return out


async def explain(url: str, workspace: str) -> list[str]:
    from service.queries.browse import FIRST_PAGE, WINDOW

    conn = await asyncpg.connect(url)
    try:
        ws = await conn.fetchval("SELECT id FROM workspaces WHERE name = $1", workspace)
        values = {
            "workspace": ws, "after_created_at": FIRST_PAGE[0], "after_id": FIRST_PAGE[1],
            "is_service": True, "member": None, "rooms": [], "limit": 26,
            "statuses": ["active"], "tiers": None, "fact_types": None, "not_fact_types": None,
            "scope": None, "provider": None, "pattern": None, "fact_type_given": False,
        }  # fmt: skip
        rows = await conn.fetch(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + WINDOW.sql, *WINDOW.args(values)
        )
        return [r[0] for r in rows]
    finally:
        await conn.close()


async def one(
    session: aiohttp.ClientSession, url: str, key: str
) -> tuple[float, float, str | None]:
    started = time.perf_counter()
    async with session.get(url, headers={"Authorization": f"Bearer {key}"}) as resp:
        body = await resp.json()
        assert resp.status == 200, body
        server_ms = float(resp.headers["Server-Timing"].split("dur=")[1])
    return time.perf_counter() - started, server_ms / 1000, body["cursor"]


async def run(base: str, keys_by_ws: dict[str, dict[str, str]], requests: int) -> dict[str, Any]:
    rng = random.Random(7)
    client: dict[str, list[float]] = {ws: [] for ws in keys_by_ws}
    server: dict[str, list[float]] = {ws: [] for ws in keys_by_ws}
    cursors: dict[tuple[str, str], str | None] = {}
    async with aiohttp.ClientSession() as session:
        for i in range(requests + 40):
            query = MIX[i % len(MIX)]
            who = "personal" if i % 5 == 4 else "service"
            follow = rng.random() < 0.5
            for ws, keys in keys_by_ws.items():  # alternate: same request to both sizes
                q = query
                cursor = cursors.get((ws, query + who))
                if follow and cursor:
                    q = f"{query}&cursor={cursor}" if query else f"cursor={cursor}"
                c, s, next_cursor = await one(session, f"{base}/api/v1/memories?{q}", keys[who])
                cursors[(ws, query + who)] = next_cursor
                if i >= 40:  # warm-up excluded
                    client[ws].append(c)
                    server[ws].append(s)
    return {
        ws: {"client": summary_ms(client[ws]), "server": summary_ms(server[ws])}
        for ws in keys_by_ws
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--big", type=int, default=1_000_000)
    args = parser.parse_args()
    texts = [t.text for t in load_turns()]
    sizes = {"small": 10_000, "big": args.big}
    results: dict[str, Any] = {"machine": machine(), "args": vars(args), "sizes": sizes}
    with tempfile.TemporaryDirectory(prefix="mneme-bench-") as tmp:
        server = Server(Path(tmp) / "data", KEY, MNEME_WORKER="off")
        try:
            await server.ready()
            url = server.database_url()
            keys_by_ws = await setup(url, sizes, texts)
            results["plan_big_first_page"] = await explain(url, "big")
            results["latency"] = await run(server.base, keys_by_ws, args.requests)
        finally:
            server.stop()
    lat = results["latency"]
    results["ratio_p50_big_over_small"] = {
        side: round(lat["big"][side]["p50_ms"] / lat["small"][side]["p50_ms"], 3)
        for side in ("client", "server")
    }
    path = write_results("browse", results)
    (path.parent / "browse.md").write_text(render(results))
    print(results["latency"], results["ratio_p50_big_over_small"])


def render(r: dict[str, Any]) -> str:
    m, lat, ratio = r["machine"], r["latency"], r["ratio_p50_big_over_small"]
    lines = [
        "# Browse benchmark",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; Python {m['python']}. "
        f"Run {m['date']}. Client, `mneme serve` and embedded PostgreSQL share these cores.",
        "",
        "Command: `.venv/bin/python -m bench.browse_bench`",
        "",
        f"One database: workspace `small` with {r['sizes']['small']:,} memories, `big` with "
        f"{r['sizes']['big']:,}. {r['args']['requests']} requests per size (after 40 warm-up), "
        "alternating sizes, mixing first pages and cursor pages, filters "
        "(tier, factType, notFactType+status, search, scope) and limits 25/50/100, "
        "service and personal keys.",
        "",
        "| memories | client p50 ms | client p95 ms | server p50 ms | server p95 ms |",
        "|---|---|---|---|---|",
    ]
    for ws in ("small", "big"):
        c, s = lat[ws]["client"], lat[ws]["server"]
        row = [f"{r['sizes'][ws]:,}", c["p50_ms"], c["p95_ms"], s["p50_ms"], s["p95_ms"]]
        lines.append("| " + " | ".join(str(v) for v in row) + " |")
    lines += [
        "",
        f"p50 ratio 1M / 10k: client {ratio['client']}, server {ratio['server']} (target ≤ 1.5); "
        "server-side = the `Server-Timing` header (target p50 ≤ 3 ms at 1M).",
        "",
        "First-page plan at 1M (service key, no filter):",
        "",
        "```",
        *r["plan_big_first_page"],
        "```",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    asyncio.run(main())
