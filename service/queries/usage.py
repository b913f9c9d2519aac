"""Billed usage per workspace, day and endpoint: the SQL (gathered by service.ops.meter)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from service.queries import Conn
from service.queries.named import NamedSQL

RECORD_MANY = NamedSQL("""
INSERT INTO usage_daily AS u (workspace_id, day, endpoint, requests, units)
SELECT w, (now() AT TIME ZONE 'UTC')::date, e, r, n
FROM unnest(:workspaces::text[], :endpoints::text[], :requests::bigint[], :units::float8[])
    AS x(w, e, r, n)
ORDER BY w, e
ON CONFLICT (workspace_id, day, endpoint) DO UPDATE
SET requests = u.requests + EXCLUDED.requests, units = u.units + EXCLUDED.units
""")


async def record_many(conn: Conn, batch: dict[tuple[str, str], tuple[int, float]]) -> None:
    """Add requests and units to today's rows, for each (workspace, endpoint) of ``batch``."""
    await RECORD_MANY.execute(
        conn,
        workspaces=[w for w, _ in batch],
        endpoints=[e for _, e in batch],
        requests=[r for r, _ in batch.values()],
        units=[n for _, n in batch.values()],
    )


@dataclass(frozen=True)
class Day:
    day: date
    endpoint: str
    requests: int
    units: float


LIST = NamedSQL("""
SELECT day, endpoint, requests, units::float8 AS units FROM usage_daily
WHERE workspace_id = :workspace AND day >= :start AND day <= :end
ORDER BY day, endpoint
""")


async def days(conn: Conn, workspace_id: str, start: date, end: date) -> list[Day]:
    rows = await LIST.fetch(conn, workspace=workspace_id, start=start, end=end)
    return [Day(**r) for r in rows]
