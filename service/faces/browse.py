"""Browse face (seed 000): ``GET /api/v1/memories``.

Parse the query string (400s list the valid values), run the window query, render:
survivors sorted by ``lastUsedAt`` then ``id``, newest first; an opaque cursor for the
last scanned row; never a total.
"""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from aiohttp import web
from multidict import MultiMapping

from service.app_keys import READ_POOL
from service.faces.render import browse_object
from service.http.json import json_response
from service.http.middleware import principal_of
from service.ids import id_pattern
from service.problems import Invalid, NotFound
from service.queries import browse, memories
from service.queries.keys import Principal
from service.write.fields import STATUSES, TIERS, query_int

DEFAULT_LIMIT = 25
MAX_LIMIT = 100
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MEMORY_ID = id_pattern("mem")
Query = MultiMapping[str]  # a request's query parameters


def encode_cursor(created_at: datetime, memory_id: str) -> str:
    micros = (created_at - _EPOCH) // timedelta(microseconds=1)
    return base64.urlsafe_b64encode(f"{micros}:{memory_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str] | None:
    """The keyset in a cursor; ``None`` (scan from the top) if it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        micros, memory_id = raw.split(":", 1)
        if not MEMORY_ID.fullmatch(memory_id):
            return None
        return _EPOCH + timedelta(microseconds=int(micros)), memory_id
    except (binascii.Error, UnicodeDecodeError, ValueError, OverflowError):
        return None


def _param(query: Query, name: str) -> str | None:
    """A query parameter; an empty value means the parameter is absent."""
    value = query.get(name)
    return value if value else None


def _list(query: Query, name: str) -> list[str] | None:
    """Comma-separated, items trimmed, empty items ignored; absent if nothing is left. A
    repeated parameter adds its items (``inputs.LISTS``)."""
    raw = ",".join(query.getall(name, []))
    items = [item.strip(" \t") for item in raw.split(",") if item.strip(" \t")]
    return items or None


def _checked(query: Query, name: str, valid: tuple[str, ...]) -> list[str] | None:
    items = _list(query, name)
    bad = [item for item in items or [] if item not in valid]
    if bad:
        raise Invalid(
            f"Invalid {name} value(s): {', '.join(bad)}. Valid values: {', '.join(valid)}",
            param=name,
            valid=list(valid),
        )
    return items


def parse_limit(raw: str | None) -> tuple[int, bool]:
    """(limit, capped): a positive integer, above 100 silently 100."""
    if raw is None:
        return DEFAULT_LIMIT, False
    value = query_int(raw)
    if value is None or value < 1:
        raise Invalid(f"limit must be a positive integer, got {raw[:40]!r}", param="limit")
    return (MAX_LIMIT, True) if value > MAX_LIMIT else (value, False)


async def list_memories(request: web.Request) -> web.Response:
    # The read pool may lag the primary (MNEME_READ_DATABASE_URL).
    body = await window_of(request.app[READ_POOL], principal_of(request), request.query)
    return json_response(body)


async def window_of(pool: asyncpg.Pool, principal: Principal, query: Query) -> dict[str, Any]:
    """One browse window for these query parameters, as the face answers it (the MCP
    door's ``browse`` reads windows so too)."""
    limit, capped = parse_limit(_param(query, "limit"))
    filters = await _filters(pool, principal, query)
    cursor = _param(query, "cursor")
    after = decode_cursor(cursor) if cursor is not None else None
    found = await browse.window(pool, principal, filters, after, limit)
    survivors = [r for r in found.rows if r.passes and not r.observation]
    survivors.sort(key=lambda r: (r.last_used_at, r.id), reverse=True)
    meta: dict[str, Any] = {
        "scannedCount": len(found.rows),
        "hiddenObservationCount": sum(r.passes and r.observation for r in found.rows),
    }
    if capped:
        meta.update(limitCapped=True, maxLimit=MAX_LIMIT)
    last = found.rows[-1] if found.rows else None
    return {
        "data": [browse_object(r) for r in survivors],
        "cursor": encode_cursor(last.created_at, last.id) if found.has_more and last else None,
        "hasMore": found.has_more,
        "meta": meta,
    }


async def _filters(pool: asyncpg.Pool, principal: Principal, query: Query) -> browse.Filters:
    store_id = None
    if (store_ref := _param(query, "store")) is not None:
        store = await memories.resolve_store(pool, principal.workspace_id, store_ref)
        if store is None:
            raise NotFound(f"Store {store_ref!r} not found")
        store_id = store.id
    return browse.Filters(
        statuses=_checked(query, "status", STATUSES) or ["active"],
        tiers=_checked(query, "tier", TIERS),
        fact_types=_list(query, "factType"),
        not_fact_types=_list(query, "notFactType"),
        scope=_param(query, "scope"),
        provider=_param(query, "provider"),
        search=_param(query, "search"),
        store_id=store_id,
    )
