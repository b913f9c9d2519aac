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
from service.queries.memories import LAST_USED_AT, readable_by
from service.queries.named import NamedSQL

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
    WHERE m.workspace_id = :workspace
      {store}
      AND (m.created_at, m.id) < (:after_created_at::timestamptz, :after_id::text)
      AND mneme_readable(m.scope, :is_service, :member, :rooms)
    ORDER BY m.created_at DESC, m.id DESC
    LIMIT :limit
) m
CROSS JOIN LATERAL (
    -- coalesce: a NULL fact type compares as unknown, and unknown is not a match.
    SELECT coalesce(m.status = ANY(:statuses::text[])
           AND (:tiers::text[] IS NULL OR m.tier = ANY(:tiers::text[]))
           AND (:fact_types::text[] IS NULL OR m.fact_type = ANY(:fact_types::text[]))
           AND (:not_fact_types::text[] IS NULL OR m.fact_type IS NULL
                OR NOT m.fact_type = ANY(:not_fact_types::text[]))
           AND (:scope::text IS NULL OR m.scope = :scope::text)
           AND (:provider::text IS NULL OR m.provider = :provider::text)
           AND (:pattern::text IS NULL OR m.text ILIKE :pattern::text ESCAPE '\\'), false)
           AS passes,
           -- The default observation rule, off as soon as any fact-type filter is given.
           NOT :fact_type_given::boolean AND m.tier = 'hindsight'
           AND m.fact_type IS NOT DISTINCT FROM 'observation'
           AS observation
) f
ORDER BY m.created_at DESC, m.id DESC
"""

WINDOW = NamedSQL(_WINDOW.format(store="", last_used_at=LAST_USED_AT))
WINDOW_IN_STORE = NamedSQL(
    _WINDOW.format(store="AND m.store_id = :store_id", last_used_at=LAST_USED_AT)
)

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
    values: dict[str, object] = {
        **readable_by(principal),
        "after_created_at": created_at,
        "after_id": memory_id,
        "limit": limit + 1,
        "statuses": filters.statuses,
        "tiers": filters.tiers,
        "fact_types": filters.fact_types,
        "not_fact_types": filters.not_fact_types,
        "scope": filters.scope,
        "provider": filters.provider,
        "pattern": None if filters.search is None else like_pattern(filters.search),
        "fact_type_given": filters.fact_type_given,
    }
    statement = WINDOW
    if filters.store_id is not None:
        statement = WINDOW_IN_STORE
        values["store_id"] = filters.store_id
    # Row's fields are the window's column names.
    rows = [Row(**r) for r in await statement.fetch(conn, **values)]
    return Window(rows[:limit], has_more=len(rows) > limit)
