"""The ranking's weights, tuned leave one conversation out (issue 14), with an ablation.

After bench.quality_bench has written the conversations through the HTTP API, every
question's candidates are fetched once with the service's own code (its store lookup,
its two SQL arms at the depth a 20-result search uses, the service's int8 query model),
then ranked here by ``service.retrieval.ranking`` under each weight setting of a small grid. For
each conversation, the setting that does best on the other seven is scored on it; the
leave-one-out figure is the mean over those eight held-out folds. The in-sample figure
(the best setting over all eight) and the service's shipped defaults are reported too,
and the defaults ranked here must reproduce the HTTP figure (a check that this harness
ranks what the service ranks).

Ablation, each lever added to the one before: the previous ranking (reciprocal rank
fusion, k = 5), score fusion, the named speaker, neighbours in write order, then the
month or year a question names (issue 36).
"""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from service.ops import db
from service.ops.embedding import load_embedder
from service.queries import keys, search as sq
from service.queries.search import Candidate
from service.retrieval import ranking
from service.settings import Settings

PER_ARM = 80  # a 20-result search's (service.retrieval.retrieve.per_arm_of: max(60, 4 x 20))
TEXT_WEIGHTS = (0.5, 0.7, 1.0, 1.3, 1.6, 2.0)
SPEAKER_WEIGHTS = (0.2, 0.4, 0.6, 0.8)
NEIGHBOUR_WEIGHTS = (0.1, 0.2, 0.3, 0.4, 0.5)
PERIOD_WEIGHTS = (0.2, 0.4, 0.7)
HEADLINE = (1, 2, 3, 4)
# What a category may lose against the ranking before (issue 14), in the folds' choice.
MAX_LOSS = 0.01


@dataclass
class Question:
    store: str
    category: int
    evidence: list[str]
    candidates: list[Candidate]
    speaker: str | None  # the registered speaker it names
    period: ranking.Period | None = None  # the month or year it names


Ranker = Callable[[Question], list[Candidate]]


@dataclass(frozen=True)
class Retrieved:
    """One question's main retrieval, as the service makes it."""

    query: dict[str, Any]  # the question's line of queries.jsonl
    store_id: str
    profile: sq.Profile
    vector: Any  # the query's vector (the service's int8 query model)
    candidates: list[Candidate]
    speakers: list[str]  # the store's registered speakers


async def retrievals(
    database_url: str, data_dir: Path, key: str, queries: list[dict[str, Any]],
    per_arm: int = PER_ARM,
) -> AsyncIterator[tuple[Retrieved, asyncpg.Connection]]:  # fmt: skip
    """Each question's candidates, as the service's main retrieval finds them ``per_arm``
    deep, with a connection to read more by."""
    settings = Settings.from_env(
        {"MNEME_DATA_DIR": str(data_dir), "MNEME_DATABASE_URL": database_url}
    )
    embedder = load_embedder(settings)
    pool = await db.create_pool(database_url, settings, planned_once=True, min_size=1)
    try:
        principal = await keys.authenticate(pool, key)
        assert principal is not None
        for q in queries:
            found = await sq.store_and_profile(
                pool, principal.workspace_id, q["store"], q["question"], reader=principal
            )
            assert found is not None
            store, profile = found
            vector = embedder.encode_queries([q["question"]])[0]
            async with pool.acquire() as conn:
                cands = await sq.candidates(conn, sq.RetrievalRequest(
                    principal=principal, store_id=store.id, profile=profile,
                    query_text=q["question"], vector=vector, filters=sq.SearchFilters(),
                    per_arm=per_arm, subset="all", self_only=False, images=False,
                ))  # fmt: skip
                _, speakers = await sq.speaker_set(conn, principal.workspace_id, store.id)
                yield Retrieved(q, store.id, profile, vector, cands, speakers), conn
    finally:
        await pool.close()


async def fetch(
    database_url: str, data_dir: Path, key: str, queries: list[dict[str, Any]]
) -> list[Question]:
    """Each question's candidates, as the service's main retrieval finds them."""
    out = []
    async for r, _ in retrievals(database_url, data_dir, key, queries):
        q = r.query
        speaker = ranking.named_speaker(q["question"], r.speakers)
        period = ranking.named_period(q["question"])
        out.append(
            Question(q["store"], q["category"], q["evidence"], r.candidates, speaker, period)
        )
    return out


def rrf(q: Question, now: datetime) -> list[Candidate]:
    """The ranking before issue 14: reciprocal rank fusion (k = 5), then the features."""
    vec = sorted((c for c in q.candidates if c.in_vec), key=lambda c: (-(c.cosine or 0), c.id))
    txt = sorted((c for c in q.candidates if c.fts_rank is not None),
                 key=lambda c: (-(c.fts_rank or 0), c.id))  # fmt: skip
    score: dict[str, float] = defaultdict(float)
    for arm in (vec, txt):
        for i, c in enumerate(arm, 1):
            score[c.id] += 1 / (5.0 + i)
    return sorted(q.candidates, key=lambda c: (-score[c.id] * ranking.features(c, now), c.id))


def weighted(weights: ranking.Weights, now: datetime) -> Ranker:
    def rank(q: Question) -> list[Candidate]:
        ranked = ranking.scored(
            q.candidates, fuse_text=True, use_features=True, now=now, weights=weights,
            speaker=q.speaker, period=q.period,
        )  # fmt: skip
        return [c for c, _ in ranked]

    return rank


def recalls(
    questions: Sequence[Question], rank: Ranker, ids: dict[str, dict[str, str]], k: int = 10
) -> list[float]:
    """recall@k of each question."""
    out = []
    for q in questions:
        top = {ids[q.store].get(c.id, "?") for c in rank(q)[:k]}
        out.append(len(top & set(q.evidence)) / len(set(q.evidence)))
    return out


def _mean(values: Sequence[float]) -> float:
    return round(statistics.fmean(values), 4) if values else 0.0


def _by_category(questions: Sequence[Question], r: Sequence[float]) -> dict[str, float]:
    groups: dict[str, list[float]] = defaultdict(list)
    for q, x in zip(questions, r, strict=True):
        groups[str(q.category)].append(x)
        if q.category in HEADLINE:
            groups["1-4"].append(x)
    return {name: _mean(v) for name, v in sorted(groups.items())}


def leave_one_out(
    questions: Sequence[Question],
    grid: dict[str, Ranker],
    ids: dict[str, dict[str, str]],
    floor: Sequence[float] | None = None,
) -> dict[str, Any]:
    """Tune on seven conversations, score the eighth, for each; ``grid``: setting name ->
    ranker. ``floor``: each question's recall under the ranking before; a fold only picks
    among the settings that lose no more than ``MAX_LOSS`` on any category of its seven
    (adversarial included), while one does. Returns the mean of the held-out folds,
    per-category figures over all held-out questions, the in-sample best (under the same
    rule), and what each fold chose."""
    scored = {name: recalls(questions, rank, ids) for name, rank in grid.items()}
    stores = sorted({q.store for q in questions})
    headline = [i for i, q in enumerate(questions) if q.category in HEADLINE]

    def mean_over(name: str, among: set[str]) -> float:
        values = [scored[name][i] for i in headline if questions[i].store in among]
        return statistics.fmean(values) if values else 0.0

    def allowed(name: str, among: set[str]) -> bool:
        if floor is None:
            return True
        for category in {q.category for q in questions}:
            rows = [
                i for i, q in enumerate(questions) if q.category == category and q.store in among
            ]
            if rows and statistics.fmean(scored[name][i] - floor[i] for i in rows) < -MAX_LOSS:
                return False
        return True

    def pick(among: set[str]) -> str:
        ok = [name for name in grid if allowed(name, among)] or list(grid)
        return max(ok, key=lambda name: (mean_over(name, among), name))

    folds: list[dict[str, Any]] = []
    held_out = [0.0] * len(questions)
    for store in stores:
        chosen = pick(set(stores) - {store})
        folds.append({"store": store, "chosen": chosen,
                      "R@10": round(mean_over(chosen, {store}), 4)})  # fmt: skip
        for i, q in enumerate(questions):
            if q.store == store:
                held_out[i] = scored[chosen][i]
    best = pick(set(stores))
    return {
        "loo": round(statistics.fmean(float(f["R@10"]) for f in folds), 4),
        "loo_by_category": _by_category(questions, held_out),
        "in_sample": {"setting": best, **_by_category(questions, scored[best])},
        "folds": folds,
    }


def run(questions: Sequence[Question], ids: dict[str, dict[str, str]]) -> dict[str, Any]:
    now = datetime.now(UTC)
    defaults = ranking.DEFAULT_WEIGHTS
    out: dict[str, Any] = {
        "defaults": {"text": defaults.text, "speaker": defaults.speaker,
                     "neighbour": defaults.neighbour, "period": defaults.period,
                     **_by_category(questions, recalls(questions, weighted(defaults, now), ids))},
    }  # fmt: skip
    # Each lever on top of the one before; a lever's weights are tuned in its folds.
    levers: dict[str, dict[str, Ranker]] = {
        "reciprocal rank fusion (before)": {"k=5": lambda q: rrf(q, now)},
        "score fusion": {
            f"text={t}": weighted(ranking.Weights(t, 0, 0, period=0), now) for t in TEXT_WEIGHTS
        },
        "+ named speaker": {
            f"text={t} speaker={s}": weighted(ranking.Weights(t, s, 0, period=0), now)
            for t, s in itertools.product(TEXT_WEIGHTS, SPEAKER_WEIGHTS)
        },
        "+ neighbours": {
            f"text={t} speaker={s} neighbour={n}": weighted(ranking.Weights(t, s, n, 0), now)
            for t, s, n in itertools.product(TEXT_WEIGHTS, SPEAKER_WEIGHTS, NEIGHBOUR_WEIGHTS)
        },
        # Issue 36, on issue 14's weights (its own sweep: bench.lever_lab).
        "+ time in the question": {
            f"period={w}": weighted(replace(defaults, period=w), now) for w in PERIOD_WEIGHTS
        },
    }
    before = recalls(questions, levers["reciprocal rank fusion (before)"]["k=5"], ids)
    out["ablation"] = {
        name: leave_one_out(questions, grid, ids, before) for name, grid in levers.items()
    }
    return out


def render(r: dict[str, Any], http_r10: float | None) -> list[str]:
    d = r["defaults"]
    lines = [
        "## Ranking levers, leave one conversation out (bench.ranking_folds)",
        "",
        "Each question's candidates fetched once with the service's code (store lookup, both",
        f"SQL arms {PER_ARM} deep, int8 query model), ranked by service.retrieval.ranking under",
        "each setting; for each conversation the setting best on the other seven (categories 1-4,",
        f"among the settings that lose no more than {MAX_LOSS} on any category of those seven",
        "against the ranking before) is scored on it. LOO = the mean of the eight held-out folds",
        "(categories 1-4, R@10); in-sample = the best setting over all eight, same rule.",
        "",
        f"Shipped defaults (text {d['text']}, speaker {d['speaker']}, neighbour "
        f"{d['neighbour']}, period {d.get('period', 0)}) ranked here: R@10 "
        f"{d['1-4']} on categories 1-4"
        + (f" (through HTTP, same run: {http_r10})." if http_r10 is not None else "."),
        "",
        "| lever (added to the row above) | LOO R@10 1-4 | LOO multi-hop | LOO temporal | "
        "LOO open-domain | LOO single-hop | LOO adversarial | in-sample 1-4 | in-sample setting |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, a in r["ablation"].items():
        c = a["loo_by_category"]
        lines.append(
            f"| {name} | {a['loo']} | {c.get('1')} | {c.get('2')} | {c.get('3')} | "
            f"{c.get('4')} | {c.get('5')} | {a['in_sample']['1-4']} | {a['in_sample']['setting']} |"
        )
    last = list(r["ablation"].values())[-1]
    lines += [
        "",
        "Settings chosen per fold (last lever): "
        + ", ".join(f"{f['store']} {f['chosen']} ({f['R@10']})" for f in last["folds"]),
    ]
    return lines
