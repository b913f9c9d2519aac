"""Ranking for search: fuse the two arms, then weigh what users care about.

**Fusion** (Tablet 2 and Scroll 1.2): each candidate's cosine, min-max normalised over
the candidates, plus ``Weights.text`` times its full-text (BM25) score over the best
one's. Scores keep what ranks throw away: a memory far ahead in one arm stays ahead. On
LoCoMo this beat reciprocal rank fusion (bench/results/quality.md, the ablation table).
Scroll 1.1 ranks by cosine alone.

**Ranking features** (Tablet 2) multiply in: importance, recency of use, proof count
(how often the fact was confirmed), the speaker a question names (``Weights.speaker``:
"What did Caroline research?" favours Caroline's memories, when she is a registered
speaker of the store), neighbours (``Weights.neighbour``: a candidate written right
before or after one of the best candidates borrows part of its score), and
supersession: a replaced memory sinks, and always ranks below the memory that replaced
it when both are candidates, whatever else it wins.

``similarity`` is reported, never used as the sort key.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from service.queries.search import Candidate
from service.retrieval.speaker_names import SELF as SELF, SpeakerMatcher


@dataclass(frozen=True)
class Weights:
    """What the fused score is made of; the defaults are tuned on both dev shapes at once,
    LoCoMo's conversations and the personas' facts, and reported held out by conversation
    and by persona (bench.ranking_folds, bench.persona_folds)."""

    text: float = 1.0  # the full-text arm's share among turns of a conversation; vectors: 1
    speaker: float = 0.4  # the named speaker's memories: x (1 + speaker)
    neighbour: float = 0.3  # a turn next to a lending turn: + neighbour x the lender's score
    period: float = 0.4  # a memory dated in the month or year the query names: x (1 + period)
    text_facts: float = 0.1  # the full-text arm's share among standalone facts (``text_share``)
    when: float = 0.2  # a question asking when: dated memories x (1 + when)
    now: float = 0.2  # a question about the present: memories that replaced one x (1 + now)


DEFAULT_WEIGHTS = Weights()
# How many of the best candidates (by fused score, ties by id) lend part of their score
# to the candidates written right before and after them.
LENDERS = 30


def similarity(c: Candidate) -> float:
    """Cosine mapped from [-1, 1] to [0, 1]; 0 while the memory has no vector."""
    return 0.0 if c.cosine is None else max(0.0, min(1.0, (c.cosine + 1.0) / 2.0))


# A replaced memory's factor (``features``); what it matched, its replacement inherits.
SUPERSEDED = 0.6


def features(c: Candidate, now: datetime) -> float:
    importance = 0.85 + 0.3 * c.importance  # 0.85 .. 1.15
    proof = 1.0 + 0.05 * math.log1p(max(0, (c.proof_count or 1) - 1))
    superseded = SUPERSEDED if c.superseded_by is not None else 1.0
    idle_days = max(0.0, (now - c.last_used_at).total_seconds() / 86400)
    recency = 0.95 + 0.05 * math.exp(-idle_days / 90)
    return importance * proof * superseded * recency


def named_speaker(query: str, speakers: Iterable[str]) -> str | None:
    """The one registered speaker ``query`` names as a word (any case), or ``None`` when
    it names none or several ("me" never counts: in a question it is the asker). A search
    asks its store's matcher, built once for the store's speakers
    (``speaker_names.SpeakerNames``); this builds one for ``speakers``."""
    return SpeakerMatcher(speakers).named(query)


MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
# "May", "in May 2023", "May, 2023"; a year alone ("in 2022"). "May" as a verb ("may I")
# is lower-case in a question, and a month's name is written with a capital.
_MONTH = re.compile(r"\b(" + "|".join(m.capitalize() for m in MONTHS) + r")\b(?:,?\s+(\d{4}))?")
_YEAR = re.compile(r"\b(?:19|20)\d{2}\b")


@dataclass(frozen=True)
class Period:
    """A month, a year, or a month of a year, that a query names."""

    month: int | None
    year: int | None

    def holds(self, when: datetime | None) -> bool:
        return (
            when is not None
            and (self.month is None or when.month == self.month)
            and (self.year is None or when.year == self.year)
        )


# What a question asks of time besides a named period (English): when something
# happened, or how things stand now ("these days", "at the moment", "still").
_WHEN = re.compile(
    r"\b(when|how long ago|what date|which date|what year|which year|how old|since when)\b",
    re.IGNORECASE,
)
_NOW = re.compile(
    r"\b(now|these days|currently|current|at the moment|nowadays|anymore|still|today"
    r"|at present|presently)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Asks:
    """Whether a question asks when (dated memories answer it) or about the present (a
    memory that replaced another is the present's)."""

    when: bool = False
    now: bool = False


NOTHING_ASKED = Asks()


def asks(query: str) -> Asks:
    return Asks(when=_WHEN.search(query) is not None, now=_NOW.search(query) is not None)


def named_period(query: str) -> Period | None:
    """The month and/or year ``query`` names ("in May", "in May 2023", "in 2022")."""
    month = year = None
    if found := _MONTH.search(query):
        month = MONTHS.index(found.group(1).lower()) + 1
        year = int(found.group(2)) if found.group(2) else None
    if year is None and (named_year := _YEAR.search(query)):
        year = int(named_year.group(0))
    return None if month is None and year is None else Period(month, year)


def text_share(pool: Sequence[Candidate], weights: Weights) -> float:
    """The full-text arm's share for these candidates: ``weights.text`` among turns of a
    conversation (memories with a speaker), ``weights.text_facts`` among standalone facts,
    in proportion. A question about a conversation echoes the words said in it, and a
    turn's vector is diluted by chat; a question about a fact an assistant noted is asked
    in other words than the note's, so the words it shares with a note are mostly
    coincidence (the person's name, "city" in "city bike"): bench/results/issue60-*.md."""
    if not pool:
        return weights.text
    turns = sum(1 for c in pool if c.speaker is not None) / len(pool)
    return weights.text * turns + weights.text_facts * (1.0 - turns)


def fused(
    cands: Sequence[Candidate], *, fuse_text: bool, weights: Weights = DEFAULT_WEIGHTS
) -> list[tuple[Candidate, float]]:
    """Each candidate with its fused score (unordered); without ``fuse_text``, only the
    vector arm's candidates, by cosine."""
    pool = list(cands) if fuse_text else [c for c in cands if c.in_vec]
    cosines = [c.cosine for c in pool if c.cosine is not None]
    low, high = (min(cosines), max(cosines)) if cosines else (0.0, 0.0)
    span = high - low
    best_text = max((c.fts_rank or 0.0 for c in pool), default=0.0) if fuse_text else 0.0
    share = text_share(pool, weights)

    def score(c: Candidate) -> float:
        s = 0.0
        if c.cosine is not None:
            s = (c.cosine - low) / span if span > 0 else 1.0
        if best_text > 0 and c.fts_rank:
            # A memory whose vector is not made yet has only its words to go by: they
            # weigh fully, so a fact just written is found at once (SPEC §3.1).
            s += (share if c.cosine is not None else weights.text) * c.fts_rank / best_text
        return s

    return [(c, score(c)) for c in pool]


def scored(
    cands: Sequence[Candidate],
    *,
    fuse_text: bool,
    use_features: bool,
    now: datetime,
    weights: Weights = DEFAULT_WEIGHTS,
    speaker: str | None = None,
    period: Period | None = None,
    asked: Asks = NOTHING_ASKED,
) -> list[tuple[Candidate, float]]:
    """Best first, with the score. For a model with features: ``speaker``, the registered
    speaker the query names (``named_speaker``), whose memories are favoured; ``period``,
    the month or year it names (``named_period``), whose memories (by ``event_date``) are
    favoured before anything is lent, as dated memories are when it ``asked`` when, and
    memories that replaced another when it asked about the present; the ``LENDERS`` best
    turns of a conversation by fused score lend part of it to the turns written right
    before and after them in their store and scope (``Candidate.written_after``): evidence
    comes in runs, the turn before or after a strong hit is often part of the answer
    (facts noted one by one are not runs); and a memory that replaced another ranks at
    least as high as what that one matched (``inherited``), then right above it."""
    ranked = fused(cands, fuse_text=fuse_text, weights=weights)
    if not use_features:
        return sorted(ranked, key=lambda cs: (-cs[1], cs[0].id))
    if period is not None:
        dated = 1.0 + weights.period
        ranked = [(c, s * dated if period.holds(c.event_date) else s) for c, s in ranked]
    ranked = _asked(ranked, asked, weights)
    borrowed = _borrowed([cs for cs in ranked if cs[0].speaker is not None], weights)
    boost = 1.0 + weights.speaker
    ranked = [
        (
            c,
            (s + weights.neighbour * borrowed.get(c.id, 0.0))
            * features(c, now)
            * (boost if speaker is not None and c.speaker == speaker else 1.0),
        )
        for c, s in ranked
    ]
    return below_superseders(inherited(ranked))


def _asked(
    ranked: list[tuple[Candidate, float]], asked: Asks, weights: Weights
) -> list[tuple[Candidate, float]]:
    """Dated memories favoured for a question asking when; memories that replaced another
    among the candidates for a question about the present."""
    if asked.when:
        dated = 1.0 + weights.when
        ranked = [(c, s * dated if c.event_date is not None else s) for c, s in ranked]
    if asked.now:
        replacing = {c.superseded_by for c, _ in ranked if c.superseded_by is not None}
        current = 1.0 + weights.now
        ranked = [(c, s * current if c.id in replacing else s) for c, s in ranked]
    return ranked


def inherited(ranked: Sequence[tuple[Candidate, float]]) -> list[tuple[Candidate, float]]:
    """Each memory's score, raised for one that replaced a candidate to what the replaced
    one scored before it sank (along chains of replacements too): a question the old
    version answers, the new one answers now ("Where does he live?" matches "Lives in
    Leeds" best; "Moved from Leeds to Lisbon" is the answer)."""
    score = {c.id: s for c, s in ranked}
    replaced = [(c.id, c.superseded_by) for c, _ in ranked if c.superseded_by in score]
    for _ in range(len(replaced)):  # a chain of n replacements settles in n rounds
        changed = False
        for old, new in replaced:
            if score[old] / SUPERSEDED > score[new]:
                score[new], changed = score[old] / SUPERSEDED, True
        if not changed:
            break
    return [(c, score[c.id]) for c, _ in ranked]


def _borrowed(ranked: Sequence[tuple[Candidate, float]], weights: Weights) -> dict[str, float]:
    """Candidate id -> the best fused score a lender next to it lends (``scored``)."""
    if weights.neighbour <= 0:
        return {}
    lenders = heapq.nsmallest(LENDERS, ranked, key=lambda cs: (-cs[1], cs[0].id))
    lent = {c.id: s for c, s in lenders}
    out: dict[str, float] = {}

    def lend(near: str, score: float) -> None:
        out[near] = max(out.get(near, 0.0), score)

    for c, _ in ranked:
        before = c.written_after
        if before is None:
            continue
        if before in lent:  # c was written right after a lender
            lend(c.id, lent[before])
        if c.id in lent:  # a lender written right after ``before``
            lend(before, lent[c.id])
    return out


def below_superseders(ranked: Sequence[tuple[Candidate, float]]) -> list[tuple[Candidate, float]]:
    """Best first by score, except that a memory whose superseder is among ``ranked``
    comes after it (its score is capped at the superseder's, and a tie goes to the
    superseder), along a chain of supersessions too."""
    score = {c.id: s for c, s in ranked}
    superseder = {c.id: c.superseded_by for c, _ in ranked if c.superseded_by in score}
    depth: dict[str, int] = {}

    def settle(memory_id: str, seen: frozenset[str] = frozenset()) -> tuple[float, int]:
        """The memory's capped score and how many superseders rank above it."""
        if memory_id in depth:
            return score[memory_id], depth[memory_id]
        above = superseder.get(memory_id)
        if above is None or above in seen:  # none, or a cycle: no one to sink below
            depth[memory_id] = 0
            return score[memory_id], 0
        above_score, above_depth = settle(above, seen | {memory_id})
        score[memory_id] = min(score[memory_id], above_score)
        depth[memory_id] = above_depth + 1
        return score[memory_id], depth[memory_id]

    for c, _ in ranked:
        settle(c.id)
    return sorted(
        ((c, score[c.id]) for c, _ in ranked), key=lambda cs: (-cs[1], depth[cs[0].id], cs[0].id)
    )


def spread(
    ranked: Sequence[tuple[Candidate, float]],
    covered: dict[Hashable, int],
    key: Callable[[Candidate], Hashable],
    limit: int,
    weight: float,
    cap: int = 1,
) -> list[Candidate]:
    """Pick ``limit`` candidates greedily by score x ``weight`` ** min(``cap``, n), n being
    how many memories with the same ``key`` are already picked (or ``covered`` before).

    A weight above 1 draws on the context of what was found (verify: the same days);
    below 1 it spreads the picks over keys. ``covered`` is updated with the picks.
    """
    pool = list(ranked)
    picked: list[Candidate] = []
    while pool and len(picked) < limit:
        best = max(
            range(len(pool)),
            key=lambda i: pool[i][1] * weight ** min(cap, covered.get(key(pool[i][0]), 0)),
        )
        c, _ = pool.pop(best)
        picked.append(c)
        covered[key(c)] = covered.get(key(c), 0) + 1
    return picked
