"""The search answer cache: one answer per store, memory model, request options and reader,
kept until it expires (service.retrieval.engine reads and writes it)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from service.queries import Conn
from service.queries.named import NamedSQL


@dataclass(frozen=True)
class Cached:
    query: str
    query_tokens: int
    result_tokens: int
    store_version: int
    memory_ids: list[str]
    response: bytes
    expires_at: datetime


GET_CACHED = NamedSQL("""
SELECT query, query_tokens, result_tokens, store_version, memory_ids, response, expires_at
FROM search_cache
WHERE workspace_id = :workspace_id AND store_id = :store_id AND model = :model
  AND options_sha256 = :options_sha256 AND reader_sha256 = :reader_sha256 AND expires_at > now()
""")

PUT_CACHED = NamedSQL("""
INSERT INTO search_cache AS c (workspace_id, store_id, model, options_sha256, reader_sha256, query,
                               query_tokens, result_tokens, store_version, memory_ids, response,
                               expires_at)
VALUES (:workspace_id, :store_id, :model, :options_sha256, :reader_sha256, :query,
        :query_tokens, :result_tokens, :store_version, :memory_ids, :response,
        now() + make_interval(secs => :ttl_s))
ON CONFLICT (workspace_id, store_id, model, options_sha256, reader_sha256) DO UPDATE
SET query = EXCLUDED.query, query_tokens = EXCLUDED.query_tokens,
    result_tokens = EXCLUDED.result_tokens, store_version = EXCLUDED.store_version,
    memory_ids = EXCLUDED.memory_ids, response = EXCLUDED.response,
    expires_at = EXCLUDED.expires_at, created_at = now()
""")

PRUNE = NamedSQL("DELETE FROM search_cache WHERE expires_at < now()")


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


def _key(key: CacheKey) -> dict[str, object]:
    return {
        "workspace_id": key.workspace_id,
        "store_id": key.store_id,
        "model": key.model,
        "options_sha256": key.options_sha256,
        "reader_sha256": key.reader_sha256,
    }


async def cached(conn: Conn, key: CacheKey) -> Cached | None:
    row = await GET_CACHED.fetchrow(conn, **_key(key))
    return None if row is None else Cached(**row)


async def put_cached(conn: Conn, key: CacheKey, entry: Cached, ttl_s: float) -> None:
    """Keeps an answer; nothing when its store was deleted since the search began."""
    with contextlib.suppress(asyncpg.ForeignKeyViolationError):
        await PUT_CACHED.execute(
            conn,
            **_key(key),
            query=entry.query,
            query_tokens=entry.query_tokens,
            result_tokens=entry.result_tokens,
            store_version=entry.store_version,
            memory_ids=entry.memory_ids,
            response=entry.response,
            ttl_s=ttl_s,
        )


async def prune(conn: Conn) -> None:
    await PRUNE.execute(conn)
