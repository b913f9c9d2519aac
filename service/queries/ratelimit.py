"""Per-workspace request rate limits, counted in PostgreSQL so every instance shares them.

A sliding-window estimate over one-minute buckets: the previous minute's count, weighted
by how much of it still overlaps the last 60 seconds, plus this minute's count. Unlike
fixed windows it does not let a client send twice the limit across a minute boundary.
The check and the increment are one statement (``mneme_rate_hit``): the counter row's
lock serialises concurrent requests from any number of instances. Refused requests are
not counted, so a client that backs off for ``Retry-After`` seconds is let through again.
A previous minute whose last counted request is 60 seconds old weighs nothing (0023), so a
workspace with no request in the last 60 seconds is never refused, and ``Retry-After`` is
at most 60.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from service.queries import Conn
from service.queries.named import NamedSQL

# The check-and-count itself is the SQL function mneme_rate_hit (0001, 0023), so the
# authentication query can run it in the same round trip (keys.authenticate).
HIT = NamedSQL("SELECT * FROM mneme_rate_hit(:workspace, :limit)")

# After this long with nothing counted, the window holds no request and one is admitted.
WINDOW_S = 60

PRUNE = NamedSQL(
    "DELETE FROM rate_limit_counters WHERE window_start < now() - interval '2 minutes'"
)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    retry_after: int  # seconds; 0 when allowed


def retry_after(limit: int, current: int, previous: int, elapsed: float) -> int:
    """Seconds until the sliding estimate admits one more request: at most ``WINDOW_S``
    (by then the last counted request has left the window)."""
    if current + 1 <= limit:
        # Still in this minute: wait until the previous minute's weight has decayed enough.
        need = 1.0 - (limit - current - 1) / previous if previous else elapsed
        wait = (need - elapsed) * 60.0
    else:
        # This minute is full: wait for the next one, then for this one's weight to decay.
        need = max(0.0, 1.0 - (limit - 1) / current)
        wait = (1.0 - elapsed) * 60.0 + need * 60.0
    return max(1, min(WINDOW_S, math.ceil(wait)))


def decision(limit: int, allowed: bool, current: int, previous: int, elapsed: float) -> Decision:
    if allowed:
        return Decision(True, 0)
    return Decision(False, retry_after(limit, current, previous, elapsed))


async def hit(conn: Conn, workspace_id: str, limit: int) -> Decision:
    row = await HIT.fetchrow(conn, workspace=workspace_id, limit=limit)
    assert row is not None
    return decision(
        limit,
        row["allowed"],
        row["current_count"],
        row["previous_count"],
        row["elapsed_fraction"],
    )


async def prune(conn: Conn) -> None:
    await PRUNE.execute(conn)
