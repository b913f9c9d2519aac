"""The browse window (seed 000): a bounded keyset scan, with filters applied to it.

The window is the next ``limit`` memories the caller may read, newest first by
``(created_at, id)``, strictly after the cursor. Readability is part of the window (so
``scannedCount`` never counts what the caller cannot see); every other filter is
evaluated on the window's rows in the same statement. One extra row is fetched to tell
whether more exist past the window. The SQL is static: the keyset bound is always a
real value (a far-future timestamp on the first page), so the condition stays an index bound
under a generic plan, and the scan is an index range walk on ``memories_window`` (or
``memories_store_window`` with a store) whatever the bank's size.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from service.queries import Conn
from service.queries.keys import Principal
from service.queries.memories import LAST_USED_AT

_WINDOW = """
SELECT m.id, m.created_at, m.last_used_at, m.scope, m.tier, m.fact_type, m.status,
       m.provider, m.provider_ref, m.entity_refs, m.proof_count, m.first_seen_at,
       f.passes, f.observation,
       CASE WHEN f.passes AND NOT f.observation THEN m.text END AS text
FROM (
    SELECT m.id, m.created_at, {last_used_at} AS last_used_at, m.scope, m.tier, m.fact_type,
           m.status, m.provider, m.provider_ref, m.entity_refs, m.proof_count, m.first_seen_at,
           m.text
    FROM memories m
    WHERE m.workspace_id = $1
      {store}
      AND (m.created_at, m.id) < ($2::timestamptz, $3::text)
      AND mneme_readable(m.scope, $4, $5, $6)
    ORDER BY m.created_at DESC, m.id DESC
    LIMIT $7
) m
CROSS JOIN LATERAL (
    -- coalesce: a NULL fact type compares as unknown, and unknown is not a match.
    SELECT coalesce(m.status = ANY($8::text[])
           AND ($9::text[] IS NULL OR m.tier = ANY($9::text[]))
           AND ($10::text[] IS NULL OR m.fact_type = ANY($10::text[]))
           AND ($11::text[] IS NULL OR m.fact_type IS NULL OR NOT m.fact_type = ANY($11::text[]))
           AND ($12::text IS NULL OR m.scope = $12::text)
           AND ($13::text IS NULL OR m.provider = $13::text)
           AND ($14::text IS NULL OR m.text ILIKE $14::text ESCAPE '\\'), false)
           AS passes,
           -- The default observation rule, off as soon as any fact-type filter is given.
           NOT $15::boolean AND m.tier = 'hindsight'
           AND m.fact_type IS NOT DISTINCT FROM 'observation'
           AS observation
) f
ORDER BY m.created_at DESC, m.id DESC
"""

WINDOW = _WINDOW.format(store="", last_used_at=LAST_USED_AT)
WINDOW_IN_STORE = _WINDOW.format(store="AND m.store_id = $16", last_used_at=LAST_USED_AT)

FIRST_PAGE = (datetime.fromisoformat("9999-12-31T23:59:59+00:00"), "")


@dataclass(frozen=True)
class Filters:
    statuses: list[str]
    tiers: list[str] | None = None
    fact_types: list[str] | None = None
    not_fact_types: list[str] | None = None
    scope: str | None = None
    provider: str | None = None
    search: str | None = None
    store_id: str | None = None

    @property
    def fact_type_given(self) -> bool:
        return self.fact_types is not None or self.not_fact_types is not None


@dataclass(frozen=True)
class Row:
    id: str
    created_at: datetime
    last_used_at: datetime
    scope: str
    tier: str
    fact_type: str | None
    status: str
    provider: str
    provider_ref: str
    entity_refs: list[str]
    proof_count: int | None
    first_seen_at: datetime
    passes: bool
    observation: bool
    text: str | None


@dataclass(frozen=True)
class Window:
    rows: list[Row]  # the scanned window, newest first
    has_more: bool


def like_pattern(search: str) -> str:
    """A substring match where ``%``, ``_`` and ``\\`` mean themselves."""
    escaped = search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


async def window(
    conn: Conn,
    principal: Principal,
    filters: Filters,
    after: tuple[datetime, str] | None,
    limit: int,
) -> Window:
    created_at, memory_id = after or FIRST_PAGE
    args: list[object] = [
        principal.workspace_id, created_at, memory_id,
        principal.is_service, principal.member, principal.rooms,
        limit + 1,
        filters.statuses, filters.tiers, filters.fact_types, filters.not_fact_types,
        filters.scope, filters.provider,
        None if filters.search is None else like_pattern(filters.search),
        filters.fact_type_given,
    ]  # fmt: skip
    sql = WINDOW
    if filters.store_id is not None:
        sql = WINDOW_IN_STORE
        args.append(filters.store_id)
    # Columns come in Row's field order (asserted in the tests), so build positionally.
    rows = [Row(*r) for r in await conn.fetch(sql, *args)]
    return Window(rows[:limit], has_more=len(rows) > limit)
