"""verify: further passes that reach past plain rank order (SPEC §3.3)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import replace
from datetime import datetime

from service.queries.search import Candidate
from service.retrieval import ranking
from service.times import utc

# verify's passes (tuned on LoCoMo multi-hop leave one conversation out,
# bench/results/issue36-retrieval-levers.md): a candidate from a day the answer already
# draws on counts this much more; the speaker the question names weighs this much in the
# passes' order (x 4, against x 1.4 in the first pass's); candidates per arm (at least).
VERIFY_SAME_DAY = 1.3
VERIFY_SPEAKER = 3.0
VERIFY_DEPTH = 80
PASS_WEIGHTS = replace(ranking.DEFAULT_WEIGHTS, speaker=VERIFY_SPEAKER)


def verify_depth(per_arm: int, passes: int) -> int:
    """Candidates per arm of a retrieval that verify's ``passes`` draw on: a little deeper
    than a plain one."""
    return max(per_arm, VERIFY_DEPTH) if passes else per_arm


def day_of(c: Candidate) -> Hashable:
    return utc(c.event_date or c.created_at).date()


def pass_order(
    ranked: Sequence[tuple[Candidate, float]],
    *,
    now: datetime,
    speaker: str | None,
    period: ranking.Period | None,
    asked: ranking.Asks = ranking.NOTHING_ASKED,
    weights: ranking.Weights = PASS_WEIGHTS,
) -> list[tuple[Candidate, float]]:
    """The order verify's passes draw on: the first pass's candidates ranked again with
    the speaker the question names favoured far more. A question about one person that
    needs several memories ("What books has John read?") is answered mostly by that
    person's own words, spread over sessions; the first pass weighs the speaker lightly,
    because there one strong match said by anyone should still win. Without a named
    speaker, the first pass's order. verify is Tablet 2's alone (``retrieval.memory_models``),
    a model that fuses the full-text arm and ranks by features: so does this order."""
    if speaker is None:
        return list(ranked)
    return ranking.scored(
        [c for c, _ in ranked],
        fuse_text=True,
        use_features=True,
        now=now,
        weights=weights,
        speaker=speaker,
        period=period,
        asked=asked,
    )


def verify_passes(
    first: list[Candidate], ranked: list[tuple[Candidate, float]], per_pass: int, passes: int
) -> tuple[list[Candidate], int]:
    """verify: up to ``passes`` more passes of ``per_pass`` memories each, drawn from
    ``ranked`` (``pass_order``'s).

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
