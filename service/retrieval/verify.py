"""verify: further passes that reach past plain rank order (SPEC §3.3)."""

from __future__ import annotations

from collections.abc import Hashable

from service.http.json import utc
from service.queries.search import Candidate
from service.retrieval import ranking

# verify (tuned on LoCoMo multi-hop, bench/results/quality.md): a candidate from a day the
# answer already draws on counts this much more; candidates per arm (at least). 1.6 paid
# under reciprocal-rank fusion; since score fusion and neighbours (service.retrieval.ranking) the
# plain ranking already draws on a hit's context, and 1.1 was the best of 0.8-1.6 (plain
# order is 1.0).
VERIFY_SAME_DAY = 1.1
VERIFY_DEPTH = 80


def verify_depth(per_arm: int, passes: int) -> int:
    """Candidates per arm of a retrieval that verify's ``passes`` draw on: a little deeper
    than a plain one."""
    return max(per_arm, VERIFY_DEPTH) if passes else per_arm


def day_of(c: Candidate) -> Hashable:
    return utc(c.event_date or c.created_at).date()


def verify_passes(
    first: list[Candidate], ranked: list[tuple[Candidate, float]], per_pass: int, passes: int
) -> tuple[list[Candidate], int]:
    """verify: up to ``passes`` more passes of ``per_pass`` memories each.

    A pass never repeats a memory already returned, and it reaches past plain rank
    order into the context of what was found: a memory from a day (a session, for a
    conversation) that the answer already draws on weighs ``VERIFY_SAME_DAY`` times its
    score. Multi-hop questions are answered by several statements about one topic, and
    they tend to sit in the same sessions as the first evidence found. The order of the
    fused ranking is kept otherwise: what was returned is dropped after ranking, not
    excluded before it (that would promote whatever followed it in one arm). Stops early
    when a pass adds nothing; returns the memories and the passes that added some.
    """
    returned = {c.id for c in first}
    covered: dict[Hashable, int] = {}
    for c in first:
        covered[day_of(c)] = covered.get(day_of(c), 0) + 1
    out, used = list(first), 0
    for _ in range(passes):
        fresh = [(c, score) for c, score in ranked if c.id not in returned]
        extra = ranking.spread(fresh, covered, day_of, per_pass, VERIFY_SAME_DAY, cap=1)
        if not extra:
            break
        used += 1
        out += extra
        returned.update(c.id for c in extra)
    return out, used
