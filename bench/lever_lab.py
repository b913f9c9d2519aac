"""Ranking levers for issue 36, measured offline on cached candidates before any is built.

``--fetch`` writes LoCoMo through the HTTP API of a fresh ``mneme serve`` (as
bench.quality_bench does), fetches every question's candidates once with the service's
own retrieval (``bench.ranking_folds.fetch``: its store lookup, both SQL arms 80 deep,
its int8 query model) and caches them with the memory id -> dialogue id map in
``CACHE`` (under /tmp: the data's licence keeps it out of the repository). Without
``--fetch`` the cache is read and each lever is scored in seconds, leave one
conversation out as in issue 14 (``ranking_folds.leave_one_out``), against the shipped
ranking as the floor no category may fall below by more than 0.01.

Levers (each on top of today's ranking, ``service.retrieval.ranking.scored``):

- **session evidence**: a candidate in a session (its store's ``event_date``, which
  every turn of a LoCoMo session shares) that holds other strong candidates borrows
  ``w`` times the mean of the best ``m`` fused scores among them, before the features;
- **time in the question**: a question that names a month or a year favours (by a
  factor ``1 + w``) the candidates whose ``event_date`` falls in it.

    .venv/bin/python -m bench.lever_lab --fetch   # once: about 3 minutes
    .venv/bin/python -m bench.lever_lab           # seconds
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import pickle
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import ranking_folds
from bench.common import load_turns, machine
from bench.quality_bench import KEY, load_queries, locomo_written
from bench.ranking_folds import Question, Ranker
from service.queries.search import Candidate
from service.retrieval import ranking

CACHE = Path(tempfile.gettempdir()) / "mneme-lever-lab.pickle"
SESSION_WEIGHTS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
SESSION_DEPTHS = (1, 2, 3)
TIME_WEIGHTS = (0.1, 0.2, 0.4, 0.7, 1.0, 1.5, 2.5)


async def fetch() -> None:
    queries = load_queries({t.store for t in load_turns()})
    async with locomo_written("mneme-lab-") as (server, data_dir, ids):
        questions = await ranking_folds.fetch(server.database_url(), data_dir, KEY, queries)
    texts = [q["question"] for q in queries]
    CACHE.write_bytes(pickle.dumps({"questions": questions, "ids": ids, "texts": texts}))
    print(f"cached {len(questions)} questions in {CACHE}")


def with_session_evidence(
    fused: Sequence[tuple[Candidate, float]], weight: float, depth: int
) -> list[tuple[Candidate, float]]:
    """Each candidate plus ``weight`` times the mean of the best ``depth`` fused scores of
    the other candidates in its session (its ``event_date``)."""
    by_session: dict[Any, list[float]] = defaultdict(list)
    for c, s in fused:
        if c.event_date is not None:
            by_session[c.event_date].append(s)
    for scores in by_session.values():
        scores.sort(reverse=True)

    def evidence(c: Candidate, s: float) -> float:
        if c.event_date is None:
            return 0.0
        others = list(by_session[c.event_date])
        others.remove(s)
        best = others[:depth]
        return sum(best) / depth if best else 0.0

    return [(c, s + weight * evidence(c, s)) for c, s in fused]


def with_named_period(
    fused: Sequence[tuple[Candidate, float]], text: str, weight: float
) -> list[tuple[Candidate, float]]:
    """Candidates whose ``event_date`` falls in the month or year ``text`` names (the
    service's ``ranking.named_period``), times ``1 + weight``."""
    period = ranking.named_period(text)
    if period is None:
        return list(fused)
    return [(c, s * (1 + weight) if period.holds(c.event_date) else s) for c, s in fused]


def lever_ranker(
    now: datetime, texts: dict[int, str], *, session: tuple[float, int] = (0.0, 1),
    period: float = 0.0,
) -> Ranker:  # fmt: skip
    def rank(q: Question) -> list[Candidate]:
        fused = ranking.fused(q.candidates, fuse_text=True, weights=ranking.DEFAULT_WEIGHTS)
        if session[0]:
            fused = with_session_evidence(fused, *session)
        if period:
            fused = with_named_period(fused, texts[id(q)], period)
        return _finish(q, fused, now)

    return rank


def _finish(
    q: Question, fused: Sequence[tuple[Candidate, float]], now: datetime
) -> list[Candidate]:
    """The rest of ``ranking.scored`` after fusion: neighbours, features, the speaker, the
    superseded below their superseders."""
    weights = ranking.DEFAULT_WEIGHTS
    borrowed = ranking._borrowed(fused, weights)
    boost = 1.0 + weights.speaker
    scored = [
        (c, (s + weights.neighbour * borrowed.get(c.id, 0.0)) * ranking.features(c, now)
         * (boost if q.speaker is not None and c.speaker == q.speaker else 1.0))
        for c, s in fused
    ]  # fmt: skip
    return [c for c, _ in ranking.below_superseders(scored)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fetch", action="store_true", help="write LoCoMo and cache candidates")
    args = parser.parse_args()
    if args.fetch:
        asyncio.run(fetch())
        return
    cached = pickle.loads(CACHE.read_bytes())  # noqa: S301 (this script's own cache)
    questions: list[Question] = cached["questions"]
    ids = cached["ids"]
    texts = {id(q): t for q, t in zip(questions, cached["texts"], strict=True)}
    now = datetime.now(UTC)
    today = lever_ranker(now, texts)  # the ranking before issue 36: no lever
    floor = ranking_folds.recalls(questions, today, ids)
    named = sum(1 for t in cached["texts"] if ranking.named_period(t) is not None)
    grids: dict[str, dict[str, Ranker]] = {
        "before": {"issue 14's": today},
        "session evidence": {
            f"w={w} m={m}": lever_ranker(now, texts, session=(w, m))
            for w, m in itertools.product(SESSION_WEIGHTS, SESSION_DEPTHS)
        },
        "time in the question": {
            f"w={w}": lever_ranker(now, texts, period=w) for w in TIME_WEIGHTS
        },
        "both": {
            f"session w={w} m=2, time w={p}": lever_ranker(now, texts, session=(w, 2), period=p)
            for w, p in itertools.product(SESSION_WEIGHTS[:3], TIME_WEIGHTS[:4])
        },
    }
    print(f"# Issue 36 levers on cached candidates ({machine()['cpu']})\n")
    print(f"{len(questions)} questions; {named} name a month or a year.\n")
    print("| lever | LOO R@10 1-4 | LOO multi-hop | LOO by category | in-sample |")
    print("|---|---|---|---|---|")
    for name, grid in grids.items():
        r = ranking_folds.leave_one_out(questions, grid, ids, floor)
        by = r["loo_by_category"]
        cats = " ".join(f"{k}:{v}" for k, v in by.items())
        print(f"| {name} | {r['loo']} | {by.get('1')} | {cats} | {r['in_sample']['setting']} |")


if __name__ == "__main__":
    # Run as the module bench.lever_lab, not as __main__: the classes in a cache are pickled by
    # their module's name, and so load from any script that imports this one.
    from bench import lever_lab

    lever_lab.main()
