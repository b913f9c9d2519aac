"""The persona shape (issue 60): short facts an assistant learned about a person, one store
per persona, with updates that supersede older facts (``shared/data/personas``).

Each persona becomes a store; its memories are written through ``POST /api/v1/memories``
in the set's order (``providerRef`` = the set's id, ``eventDate``, and ``supersedes`` =
the memory an update replaces), and each question is asked through
``POST /api/v1/memory/search`` of its own store. Runs are scored by the set's own
``score.py`` (R@1, R@5, MRR per category; an older version ranked above its update).

    .venv/bin/python -m bench.personas [--models "Tablet 2,Scroll 1.1"]

``bench.quality_bench`` runs it after LoCoMo, so both shapes are measured in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import tempfile
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp

from bench.common import ROOT, Server, machine, wait_embedded

PERSONAS = ROOT.parent / "shared" / "data" / "personas"
KEY = "bench-bootstrap-key-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {KEY}"}
CATEGORIES = ("fact", "preference", "temporal", "current", "multi", "other-person")


def load(name: str, split: str = "dev") -> list[dict[str, Any]]:
    with (PERSONAS / split / name).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def scorer() -> ModuleType:
    """The set's own ``score.py``."""
    spec = importlib.util.spec_from_file_location("persona_score", PERSONAS / "score.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def score(ranked: dict[str, list[str]], split: str = "dev") -> dict[str, Any]:
    """``score.py``'s figures for a run (question id -> persona memory ids, best first)."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for qid, ids in ranked.items():
            f.write(json.dumps({"qid": qid, "ranked": ids}) + "\n")
    out: dict[str, Any] = scorer().score(split, f.name, quiet=True)
    Path(f.name).unlink()
    return out


async def ingest(session: aiohttp.ClientSession, base: str) -> dict[str, dict[str, str]]:
    """Write every persona's memories; store -> Mneme id -> the set's id."""
    by_store: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for m in load("memories.jsonl"):
        by_store[m["store"]].append(m)
    ids: dict[str, dict[str, str]] = {}
    for store, memories in by_store.items():
        async with session.post(f"{base}/api/v1/forward/memory_stores", json={"name": store}) as r:
            assert r.status == 201, await r.text()
        mneme_of: dict[str, str] = {}
        for m in memories:
            body = {"text": m["text"], "store": store, "providerRef": m["id"],
                    "eventDate": m["eventDate"]}  # fmt: skip
            if m.get("supersedes"):
                body["supersedes"] = mneme_of[m["supersedes"]]
            async with session.post(f"{base}/api/v1/memories", json=body) as r:
                out = await r.json()
                assert r.status == 201, out
            mneme_of[m["id"]] = out["id"]
        ids[store] = {v: k for k, v in mneme_of.items()}
    return ids


@contextlib.asynccontextmanager
async def personas_written() -> AsyncIterator[tuple[Server, Path, dict[str, dict[str, str]]]]:
    """A fresh ``mneme serve`` with every persona written and embedded."""
    with tempfile.TemporaryDirectory(prefix="mneme-personas-") as tmp:
        server = Server(Path(tmp) / "data", KEY)
        try:
            await server.ready()
            async with aiohttp.ClientSession(headers=HEADERS) as session:
                ids = await ingest(session, server.base)
                await wait_embedded(session, server.base)
            yield server, Path(tmp) / "data", ids
        finally:
            server.stop()


async def ask_all(
    session: aiohttp.ClientSession, base: str, ids: dict[str, dict[str, str]], model: str
) -> dict[str, list[str]]:
    """Every question through the search face: question id -> the set's ids, best first."""
    ranked = {}
    for q in load("queries.jsonl"):
        body = {"user_id": q["store"], "query": q["question"], "max_results": 10}
        headers = {"X-WOS-Model": model}
        async with session.post(f"{base}/api/v1/memory/search", json=body, headers=headers) as r:
            out = await r.json()
            assert r.status == 200, out
        ranked[q["qid"]] = [ids[q["store"]][m["id"]] for m in out["memories"]]
    return ranked


def table(results: dict[str, dict[str, Any]]) -> list[str]:
    """One row per run: R@1, R@5, MRR overall, R@1 per category, stale above update."""
    head = "| run | R@1 | R@5 | MRR | " + " | ".join(f"{c} R@1" for c in CATEGORIES)
    lines = [head + " | older above update |", "|" + "---|" * (len(CATEGORIES) + 5)]
    for name, r in results.items():
        cats = " | ".join(f"{r[c][0]:.3f}" for c in CATEGORIES)
        r1, r5, mrr, _ = r["all"]
        lines.append(
            f"| {name} | {r1:.3f} | {r5:.3f} | {mrr:.3f} | {cats} | {r['stale_above_update']:.1%} |"
        )
    return lines


MODELS = ("Tablet 2", "Scroll 1.2", "Scroll 1.1")


async def measure(models: tuple[str, ...] = MODELS) -> dict[str, dict[str, Any]]:
    """Every persona written to a fresh ``mneme serve``; each model's scores."""
    results = {}
    async with (
        personas_written() as (server, _, ids),
        aiohttp.ClientSession(headers=HEADERS) as session,
    ):
        for model in models:
            results[model] = score(await ask_all(session, server.base, ids, model))
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    results = await measure(tuple(args.models.split(",")))
    print(json.dumps(machine()))
    print("\n".join(table(results)))


if __name__ == "__main__":
    asyncio.run(main())
