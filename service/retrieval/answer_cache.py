"""The answer cache of ``cache_control`` searches (SPEC §3.3): one entry per store, memory
model, request options and reader, valid while the store is at the version it was
answered at, kept ``TTL_S`` after it was written."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import msgspec

from service.queries import Conn
from service.queries.cache import Cached, CacheKey, cached, put_cached
from service.queries.keys import Principal
from service.retrieval.search_request import SearchRequest

TTL_S = {"5m": 300.0, "1h": 3600.0}


def options_key(req: SearchRequest) -> bytes:
    """Every request option except the query and cache_control."""
    options = {
        "max_results": req.max_results,
        "speaker": req.speaker,
        "filters": req.filters,
        "form": req.form,
        "tz": req.tz,
        "max_images": req.max_images,
        "verify": req.verify,
    }
    return hashlib.sha256(msgspec.json.encode(options, enc_hook=str)).digest()


def key_of(principal: Principal, store_id: str, model_name: str, req: SearchRequest) -> CacheKey:
    """The entry a search's answer is kept under: it holds only what its reader may read."""
    visibility = hashlib.sha256(principal.visibility.encode()).digest()
    return CacheKey(principal.workspace_id, store_id, model_name, options_key(req), visibility)


async def entry_for(conn: Conn, key: CacheKey, store_version: int) -> Cached | None:
    """The key's entry, if it was answered at the store's current version."""
    entry = await cached(conn, key)
    return None if entry is None or entry.store_version != store_version else entry


def prefix_tokens(entry: Cached | None, query: str) -> int:
    """The query tokens a cache write bills at the hit rate: the entry's, when its query
    begins this one."""
    return entry.query_tokens if entry is not None and query.startswith(entry.query) else 0


async def write(
    conn: Conn,
    key: CacheKey,
    ttl: str,
    *,
    query: str,
    query_tokens: int,
    result_tokens: int,
    store_version: int,
    memory_ids: list[str],
    response: bytes,
) -> None:
    """Keep a search's answer for ``ttl`` ("5m" or "1h")."""
    entry = Cached(
        query, query_tokens, result_tokens, store_version, memory_ids, response, datetime.now(UTC)
    )
    await put_cached(conn, key, entry, TTL_S[ttl])
