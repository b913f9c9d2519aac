"""Ranking for search: fuse the two arms, then weigh what users care about.

Reciprocal-rank fusion of the vector and full-text rank lists (robust to the arms'
incomparable score scales). Tablet 2 then multiplies in ranking features: importance,
recency of use, proof count (how often the fact was confirmed), and supersession
(a replaced memory sinks). ``similarity`` is reported, never used as the sort key.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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


def rank(
    cands: Sequence[Candidate], *, fuse_text: bool, use_features: bool, now: datetime
) -> list[Candidate]:
    """Best first."""
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
    return sorted(pool, key=lambda c: (-score(c), c.id))
