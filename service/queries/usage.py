"""Billed usage per workspace, day and endpoint, and the search answer cache."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import date, datetime

import asyncpg

from service.queries import Conn

RECORD_MANY = """
INSERT INTO usage_daily AS u (workspace_id, day, endpoint, requests, units)
SELECT w, (now() AT TIME ZONE 'UTC')::date, e, r, n
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::float8[]) AS x(w, e, r, n)
ORDER BY w, e
ON CONFLICT (workspace_id, day, endpoint) DO UPDATE
SET requests = u.requests + EXCLUDED.requests, units = u.units + EXCLUDED.units
"""


class Meter:
    """Billed units gathered in memory and written in one statement per flush.

    Sixteen concurrent searches of one workspace would otherwise queue on the same
    ``usage_daily`` row, each with its own commit; the service flushes every
    ``service.ops.jobs.FLUSH_S`` seconds, before answering ``GET /api/v1/usage`` and when it
    stops.
    """

    def __init__(self) -> None:
        self.pending: dict[tuple[str, str], tuple[int, float]] = {}
        # One flush at a time: a flush that returns has every unit added before it
        # written, including those a flush already in flight had taken (GET
        # /api/v1/usage flushes, then reads; it must not read before that commit).
        self._flushing = asyncio.Lock()

    def add(self, workspace_id: str, endpoint: str, units: float) -> None:
        requests, total = self.pending.get((workspace_id, endpoint), (0, 0.0))
        self.pending[workspace_id, endpoint] = (requests + 1, total + units)

    async def flush(self, conn: Conn) -> None:
        async with self._flushing:
            await self._flush(conn)

    async def _flush(self, conn: Conn) -> None:
        batch, self.pending = self.pending, {}
        if not batch:
            return
        try:
            await conn.execute(
                RECORD_MANY, [w for w, _ in batch], [e for _, e in batch],
                [r for r, _ in batch.values()], [n for _, n in batch.values()],
            )  # fmt: skip
        except BaseException:
            for (w, e), (r, n) in batch.items():  # keep them for the next flush
                requests, total = self.pending.get((w, e), (0, 0.0))
                self.pending[w, e] = (requests + r, total + n)
            raise


@dataclass(frozen=True)
class Day:
    day: date
    endpoint: str
    requests: int
    units: float


LIST = """
SELECT day, endpoint, requests, units::float8 FROM usage_daily
WHERE workspace_id = $1 AND day >= $2 AND day <= $3
ORDER BY day, endpoint
"""


async def days(conn: Conn, workspace_id: str, start: date, end: date) -> list[Day]:
    return [Day(*r) for r in await conn.fetch(LIST, workspace_id, start, end)]


# --- the search cache ---------------------------------------------------------------------


@dataclass(frozen=True)
class Cached:
    query: str
    query_tokens: int
    result_tokens: int
    store_version: int
    memory_ids: list[str]
    response: bytes
    expires_at: datetime


GET_CACHED = """
SELECT query, query_tokens, result_tokens, store_version, memory_ids, response, expires_at
FROM search_cache
WHERE workspace_id = $1 AND store_id = $2 AND model = $3 AND options_sha256 = $4
  AND reader_sha256 = $5 AND expires_at > now()
"""

PUT_CACHED = """
INSERT INTO search_cache AS c (workspace_id, store_id, model, options_sha256, reader_sha256, query,
                               query_tokens, result_tokens, store_version, memory_ids, response,
                               expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, now() + make_interval(secs => $12))
ON CONFLICT (workspace_id, store_id, model, options_sha256, reader_sha256) DO UPDATE
SET query = EXCLUDED.query, query_tokens = EXCLUDED.query_tokens,
    result_tokens = EXCLUDED.result_tokens, store_version = EXCLUDED.store_version,
    memory_ids = EXCLUDED.memory_ids, response = EXCLUDED.response,
    expires_at = EXCLUDED.expires_at, created_at = now()
"""

PRUNE = "DELETE FROM search_cache WHERE expires_at < now()"


@dataclass(frozen=True)
class CacheKey:
    """One cached answer per store, memory model, request options and reader: an answer
    holds only what its reader may read, so it is never served to a key that sees
    something else. ``reader_sha256``: SHA-256 of ``Principal.visibility``."""

    workspace_id: str
    store_id: str
    model: str
    options_sha256: bytes
    reader_sha256: bytes


async def cached(conn: Conn, key: CacheKey) -> Cached | None:
    row = await conn.fetchrow(
        GET_CACHED,
        key.workspace_id,
        key.store_id,
        key.model,
        key.options_sha256,
        key.reader_sha256,
    )
    return None if row is None else Cached(*row)


async def put_cached(conn: Conn, key: CacheKey, entry: Cached, ttl_s: float) -> None:
    """Keeps an answer; nothing when its store was deleted since the search began."""
    with contextlib.suppress(asyncpg.ForeignKeyViolationError):
        await conn.execute(
            PUT_CACHED, key.workspace_id, key.store_id, key.model, key.options_sha256,
            key.reader_sha256,
            entry.query, entry.query_tokens, entry.result_tokens, entry.store_version,
            entry.memory_ids, entry.response, ttl_s,
        )  # fmt: skip


async def prune(conn: asyncpg.Connection | asyncpg.Pool) -> None:
    await conn.execute(PRUNE)
