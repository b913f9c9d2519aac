"""Search latency, this checkout against an earlier commit, in one run (A/B).

Two `mneme serve` side by side on this machine, each on its own embedded PostgreSQL: one
from this checkout, one from ``--before`` (a temporary git worktree, the same
virtualenv). The same LoCoMo conversations are written to both through the HTTP API;
then every question is asked of both, one side after the other in a random order per
question, each after the same short pause (as bench.mem0_bench does), so a slow spell
of the machine hits both alike. Reported: client-side p50/p95 per side, the ratio, and
recall@10 (categories 1-4) per side.

    .venv/bin/python -m bench.search_ab --before b4c5697 [--stores conv-41,conv-42]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import (
    ROOT,
    Server,
    checkout,
    load_turns,
    machine,
    summary_ms,
    wait_embedded,
    write_results,
)
from bench.quality_bench import HEADERS, KEY, ask, ingest, load_queries, recall

GAP_S = 0.02


async def run(
    before: str, after: str, stores: list[str], seed: int, *, snapshots: bool = True,
    verify: int = 0,
) -> dict[str, Any]:  # fmt: skip
    rng = random.Random(seed)
    turns = [t for t in load_turns() if t.store in stores]
    queries = [q for q in load_queries(set(stores)) if q["category"] in (1, 2, 3, 4)]
    results: dict[str, Any] = {
        "machine": machine(), "before_rev": before, "after_rev": after, "stores": stores,
        "turns": len(turns), "questions": len(queries), "seed": seed, "snapshots": snapshots,
        "verify": verify,
    }  # fmt: skip
    with checkout(before) as tree, tempfile.TemporaryDirectory(prefix="mneme-ab-") as tmp:
        servers = {
            "before": _server(Path(tmp) / "before", tree, snapshots),
            "after": _server(Path(tmp) / "after", ROOT, snapshots),
        }
        try:
            await asyncio.gather(*(s.ready() for s in servers.values()))
            async with aiohttp.ClientSession(headers=HEADERS) as session:
                ids = {}
                for side, server in servers.items():
                    ids[side] = await ingest(session, server.base, turns)
                    await wait_embedded(session, server.base)
                print(f"asking {len(queries)} questions of both…", flush=True)
                asked = Asked(session, servers, ids, verify)
                seconds, found = await asked.all_of(queries, rng)
        finally:
            for server in servers.values():
                server.stop()
    for side in ("before", "after"):
        results[side] = {
            "search": summary_ms(seconds[side]),
            "recall_at_10": round(
                sum(recall(found[side][q["qid"]], q["evidence"], 10) for q in queries)
                / len(queries), 4,
            ),
        }  # fmt: skip
    a, b = results["after"]["search"], results["before"]["search"]
    results["ratio_p50"] = round(a["p50_ms"] / b["p50_ms"], 3)
    results["ratio_p95"] = round(a["p95_ms"] / b["p95_ms"], 3)
    return results


def _server(data_dir: Path, root: Path, snapshots: bool) -> Server:
    if snapshots:
        return Server(data_dir, KEY, root=root)
    # Without snapshots every search takes the SQL arms, as a large store's does.
    return Server(data_dir, KEY, root=root, MNEME_SEARCH_SNAPSHOT_MB="0")


@dataclass
class Asked:
    """The questions asked of both sides: the client-side seconds and what each found."""

    session: aiohttp.ClientSession
    servers: dict[str, Server]
    ids: dict[str, dict[str, dict[str, str]]]  # side -> store -> memory id -> dia_id
    verify: int

    async def one(self, side: str, q: dict[str, Any]) -> list[str]:
        return await ask(self.session, self.servers[side].base, q, self.ids[side],
                         model="Tablet 2", max_results=10, verify=self.verify)  # fmt: skip

    async def all_of(
        self, queries: list[dict[str, Any]], rng: random.Random
    ) -> tuple[dict[str, list[float]], dict[str, dict[str, list[str]]]]:
        """Every question of both sides, one side after the other in a random order per
        question, after the same pause; the first 20 asked of both first, unmeasured."""
        seconds: dict[str, list[float]] = {side: [] for side in self.servers}
        found: dict[str, dict[str, list[str]]] = {side: {} for side in self.servers}
        for q in queries[:20]:  # warm-up, both alike
            for side in self.servers:
                await self.one(side, q)
        for q in rng.sample(queries, len(queries)):
            for side in rng.sample(list(self.servers), 2):
                await asyncio.sleep(GAP_S)
                started = time.perf_counter()
                found[side][q["qid"]] = await self.one(side, q)
                seconds[side].append(time.perf_counter() - started)
        return seconds, found


def render(r: dict[str, Any]) -> str:
    m, a, b = r["machine"], r["after"], r["before"]
    return "\n".join([
        "# Search latency A/B",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores; run {m['date']}. Both services, their "
        "PostgreSQLs and the client share these cores.",
        "",
        f"{r['after_rev']} (after) against {r['before_rev']} (before): LoCoMo "
        f"{', '.join(r['stores'])}, {r['turns']} turns written to both, {r['questions']} "
        "questions (categories 1-4) "
        f"asked of both in a random order per question, {GAP_S * 1000:.0f} ms apart; Tablet 2, "
        "max_results 10"
        + (f", verify {r['verify']}" if r.get("verify") else "")
        + ", through HTTP"
        + ("." if r.get("snapshots", True) else "; no search snapshots (the SQL arms answer)."),
        "",
        "| side | p50 ms | p95 ms | recall@10 |",
        "|---|---|---|---|",
        f"| before | {b['search']['p50_ms']} | {b['search']['p95_ms']} | {b['recall_at_10']} |",
        f"| after | {a['search']['p50_ms']} | {a['search']['p95_ms']} | {a['recall_at_10']} |",
        "",
        f"After / before: p50 **{r['ratio_p50']}**, p95 {r['ratio_p95']}.",
        "",
        f"Command: `.venv/bin/python -m bench.search_ab --before {r['before_rev']} --stores "
        f"{','.join(r['stores'])}" + ("" if r.get("snapshots", True) else " --no-snapshots")
        + (f" --verify {r['verify']}" if r.get("verify") else "") + "`",
        "",
    ])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True, help="the git revision to compare with")
    parser.add_argument("--stores", default="conv-41,conv-42,conv-43,conv-44")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument(
        "--no-snapshots", action="store_true", help="no search snapshots: the SQL arms answer"
    )
    parser.add_argument(
        "--verify", type=int, default=0, help="verify passes of every search (0-3; default 0)"
    )
    parser.add_argument(
        "--name", help="results file name (default: search_ab[_sql][_verifyK], replaced)"
    )
    args = parser.parse_args()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    stores = args.stores.split(",")
    results = asyncio.run(
        run(args.before, head, stores, args.seed, snapshots=not args.no_snapshots,
            verify=args.verify)
    )  # fmt: skip
    name = args.name or ("search_ab" if not args.no_snapshots else "search_ab_sql") + (
        f"_verify{args.verify}" if args.verify else ""
    )
    path = write_results(name, results)
    (path.parent / f"{name}.md").write_text(render(results))
    print(render(results))


if __name__ == "__main__":
    main()
