"""Memories written per day and store, as far as the calling key may read them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time

import asyncpg

from service.queries.keys import Principal
from service.queries.named import NamedSQL

# Days are UTC days of created_at. Counted through mneme_readable, as every read is: a key
# sees the count of what it may read, never of what it may not.
WRITTEN = NamedSQL("""
SELECT (m.created_at AT TIME ZONE 'UTC')::date AS day, s.name AS store, count(*) AS written
FROM memories m
JOIN stores s ON s.workspace_id = m.workspace_id AND s.id = m.store_id
WHERE m.workspace_id = :workspace AND m.created_at >= :start AND m.created_at <= :stop
  AND mneme_readable(m.scope, :is_service, :member, :rooms)
GROUP BY 1, 2
ORDER BY 1, 2
""")


@dataclass(frozen=True)
class Written:
    day: date
    store: str
    written: int


async def written_per_day(
    pool: asyncpg.Pool, principal: Principal, start: date, end: date
) -> list[Written]:
    """Memories created on each day from ``start`` to ``end`` (both included), by store."""
    values = {
        "workspace": principal.workspace_id,
        "is_service": principal.is_service,
        "member": principal.member,
        "rooms": principal.rooms,
        "start": datetime.combine(start, time(), UTC),
        "stop": datetime.combine(end, time.max, UTC),
    }
    return [Written(**r) for r in await WRITTEN.fetch(pool, **values)]
