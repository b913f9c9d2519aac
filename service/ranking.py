"""Ranking for search: fuse the two arms, then weigh what users care about.

Reciprocal-rank fusion of the vector and full-text rank lists (robust to the arms'
incomparable score scales). Tablet 2 then multiplies in ranking features: importance,
recency of use, proof count (how often the fact was confirmed), and supersession
(a replaced memory sinks). ``similarity`` is reported, never used as the sort key.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from datetime import datetime

from service.queries.search import Candidate

RRF_K = 5.0
VECTOR_WEIGHT = 1.0
TEXT_WEIGHT = 1.0


def similarity(c: Candidate) -> float:
    """Cosine mapped from [-1, 1] to [0, 1]; 0 while the memory has no vector."""
    return 0.0 if c.cosine is None else max(0.0, min(1.0, (c.cosine + 1.0) / 2.0))


def features(c: Candidate, now: datetime) -> float:
    importance = 0.85 + 0.3 * c.importance  # 0.85 .. 1.15
    proof = 1.0 + 0.05 * math.log1p(max(0, (c.proof_count or 1) - 1))
    superseded = 0.6 if c.superseded_by is not None else 1.0
    idle_days = max(0.0, (now - c.last_used_at).total_seconds() / 86400)
    recency = 0.95 + 0.05 * math.exp(-idle_days / 90)
    return importance * proof * superseded * recency


def scored(
    cands: Sequence[Candidate], *, fuse_text: bool, use_features: bool, now: datetime
) -> list[tuple[Candidate, float]]:
    """Best first, with the fused score."""
    vec = sorted((c for c in cands if c.in_vec), key=lambda c: (-(c.cosine or 0.0), c.id))
    txt = sorted(
        (c for c in cands if c.fts_rank is not None), key=lambda c: (-(c.fts_rank or 0.0), c.id)
    )
    vec_rank = {c.id: i for i, c in enumerate(vec, 1)}
    txt_rank = {c.id: i for i, c in enumerate(txt, 1)}

    def score(c: Candidate) -> float:
        s = 0.0
        if c.id in vec_rank:
            s += VECTOR_WEIGHT / (RRF_K + vec_rank[c.id])
        if fuse_text and c.id in txt_rank:
            s += TEXT_WEIGHT / (RRF_K + txt_rank[c.id])
        if use_features:
            s *= features(c, now)
        return s

    pool = list(cands) if fuse_text else vec
    return sorted(((c, score(c)) for c in pool), key=lambda cs: (-cs[1], cs[0].id))


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
