"""The ranking's persona levers (issue 60), tuned leave one persona out, with an ablation.

After ``bench.personas`` has written every persona through the HTTP API, each question's
candidates are fetched once with the service's own code (``ranking_folds.retrievals``),
then ranked here by ``service.retrieval.ranking`` under each setting of a small grid of
the levers that matter on standalone facts: the full-text arm's share among facts
(``text_facts``), and the weights of a question asking when and one asking about the
present (``when``, ``now``). For each persona, the setting that does best (MRR, then
R@1) on the other eleven is scored on it; the held-out figure pools those twelve folds.
The levers leave LoCoMo's ranking as it was by construction (its memories are all
turns with a speaker and a date, and none replaced another); ``bench.quality_bench``
measures both shapes through HTTP in one run.

    .venv/bin/python -m bench.persona_folds
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import personas, ranking_folds
from bench.common import machine, write_results
from service.queries.search import Candidate
from service.retrieval import ranking

TEXT_FACTS = (0.0, 0.1, 0.2, 0.3, 0.5, 1.0)
WHEN = (0.0, 0.1, 0.2, 0.3)
NOW = (0.0, 0.1, 0.2, 0.3)


@dataclass
class Question:
    line: dict[str, Any]  # the question's line of queries.jsonl
    candidates: list[Candidate]
    speakers: list[str]


async def fetch(server_db: str, data_dir: Path, lines: list[dict[str, Any]]) -> list[Question]:
    out = []
    async for r, _ in ranking_folds.retrievals(server_db, data_dir, personas.KEY, lines):
        out.append(Question(r.query, r.candidates, r.speakers))
    return out


Ranker = Callable[[Question], list[Candidate]]


def ranker(weights: ranking.Weights) -> Ranker:
    now = datetime.now(UTC)

    def rank(q: Question) -> list[Candidate]:
        text = q.line["question"]
        ranked = ranking.scored(
            q.candidates, fuse_text=True, use_features=True, now=now, weights=weights,
            speaker=ranking.named_speaker(text, q.speakers), period=ranking.named_period(text),
            asked=ranking.asks(text),
        )  # fmt: skip
        return [c for c, _ in ranked]

    return rank


def run_of(
    questions: Sequence[Question], rank: Ranker, ids: dict[str, dict[str, str]]
) -> dict[str, list[str]]:
    return {q.line["qid"]: [ids[q.line["store"]][c.id] for c in rank(q)[:10]] for q in questions}


def held_out(
    questions: Sequence[Question], grid: dict[str, Ranker], ids: dict[str, dict[str, str]]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Leave one persona out: each persona ranked by the setting best on the others."""
    runs = {name: run_of(questions, rank, ids) for name, rank in grid.items()}
    stores = sorted({q.line["store"] for q in questions})
    chosen: dict[str, str] = {}
    pooled: dict[str, list[str]] = {}
    for store in stores:
        others = {q.line["qid"] for q in questions if q.line["store"] != store}

        def on_others(name: str, others: set[str] = others) -> tuple[float, float]:
            s = personas.score({k: v for k, v in runs[name].items() if k in others})
            return s["all"][2], s["all"][0]

        chosen[store] = max(sorted(grid), key=on_others)
        pooled.update({k: v for k, v in runs[chosen[store]].items() if k.startswith(store + "-")})
    return personas.score(pooled), chosen


def grid_of(base: ranking.Weights) -> dict[str, Ranker]:
    return {
        f"text_facts={t} when={w} now={n}": ranker(replace(base, text_facts=t, when=w, now=n))
        for t, w, n in itertools.product(TEXT_FACTS, WHEN, NOW)
    }


def ablation(ids: dict[str, dict[str, str]], questions: Sequence[Question]) -> dict[str, Any]:
    """Each weighted lever added to the one before, at the shipped weights (in sample).
    The first row already has the two structural changes (neighbours lend among turns
    only; a replacement inherits what the replaced memory matched): issue 59's ranking
    itself is measured through HTTP by ``bench.personas`` at its commit."""
    d = ranking.DEFAULT_WEIGHTS
    before = replace(d, text_facts=d.text, when=0.0, now=0.0)
    steps = {
        "text arm as among turns, no time cues": before,
        "+ the text arm's share among facts": replace(before, text_facts=d.text_facts),
        "+ a when question favours dated memories": replace(d, now=0.0),
        "+ a now question favours replacements": d,
    }
    return {name: personas.score(run_of(questions, ranker(w), ids)) for name, w in steps.items()}


async def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    async with personas.personas_written() as (server, data_dir, ids):
        lines = personas.load("queries.jsonl")
        questions = await fetch(server.database_url(), data_dir, lines)
    grid = grid_of(ranking.DEFAULT_WEIGHTS)
    loo, chosen = held_out(questions, grid, ids)
    shipped = personas.score(run_of(questions, ranker(ranking.DEFAULT_WEIGHTS), ids))
    results = {
        "machine": machine(),
        "held_out": loo,
        "chosen": chosen,
        "shipped_in_sample": shipped,
        "ablation": ablation(ids, questions),
    }
    path = write_results("issue60-persona-folds", results)
    table = personas.table(
        {"held out (leave one persona out)": loo, "shipped defaults, in sample": shipped}
        | results["ablation"]
    )
    path.with_suffix(".md").write_text(
        "# Persona levers, leave one persona out (bench.persona_folds)\n\n"
        f"Run {results['machine']['date']} on {results['machine']['cpu']}, "
        f"{results['machine']['cores']} cores. Grid: text_facts {TEXT_FACTS}, when {WHEN}, "
        f"now {NOW}.\n\n"
        + "\n".join(table)
        + "\n\nSettings chosen per held-out persona:\n\n"
        + "\n".join(f"- {s}: {c}" for s, c in chosen.items())
        + "\n"
    )
    print("\n".join(table))
    print(json.dumps(chosen, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
