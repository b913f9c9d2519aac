"""Write API (SPEC §3.1): create, get, patch, delete/purge, versions, media."""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from typing import Any

import asyncpg
import msgspec
from aiohttp import web

from service.app_keys import PLANNED_ONCE_POOL, POOL, READ_POOL
from service.faces.render import memory_object, receipt
from service.http.inputs import body_of, read_body
from service.http.json import json_response
from service.http.middleware import principal_of
from service.ids import id_pattern
from service.problems import Conflict, Forbidden, Invalid, NotFound
from service.queries import idempotency, memories
from service.queries.keys import Principal
from service.queries.memories import Memory
from service.times import iso
from service.write import engine, fields, items, rules

_encoder = msgspec.json.Encoder()
Query = Mapping[str, str]  # a request's query parameters
# A page of versions (SPEC §8): a metadata-only change stores a whole version, so a busy
# memory's history is read a page at a time.
VERSIONS_LIMIT = 50
VERSIONS_MAX_LIMIT = 100
VERSION_ID = id_pattern("memver")


# A duplicate folds into a memory with the same store, scope, speaker and text: those
# are what the writer sent; the rest of what is shown would be the stored memory's.
DEDUPED = {"store", "scope", "speaker", "text"}


def written_object(principal: Principal, w: rules.Written, new: rules.NewMemory) -> dict[str, Any]:
    """The answer for one written memory: all of it to a key that reads, or one it made
    from nothing; else its receipt (``render.receipt``)."""
    full = {**memory_object(w.memory), "deduplicated": w.deduplicated, "upserted": w.upserted}
    if principal.reads or w.created:
        return full
    wrote = {"store", *new.columns}
    return receipt(full, wrote & DEDUPED if w.deduplicated else wrote)


def memory_answer(principal: Principal, memory: Memory, wrote: set[str]) -> dict[str, Any]:
    """A memory after a change the caller made (``wrote``: the columns it set)."""
    full = memory_object(memory)
    return full if principal.reads else receipt(full, wrote)


async def create_memories(request: web.Request) -> web.Response:
    principal = principal_of(request)
    raw = await body_of(request)
    key = request.headers.get("Idempotency-Key")
    if key is not None and not (1 <= len(key) <= 255 and key.isascii() and key.isprintable()):
        raise Invalid("Idempotency-Key must be 1 to 255 printable ASCII characters")
    ctx = rules.WriteContext(principal)
    if key is None:
        body = items.decode_items(raw)
        written = await engine.apply(write_pools(request.app), ctx, body)
        status, encoded = _rendered(principal, written, body)
        return web.Response(body=encoded, status=status, content_type="application/json")
    async with request.app[POOL].acquire() as conn:
        # A replay must be the same request: same method, path and bytes of body. The
        # answer is stored with the memories, in one transaction.
        fingerprint = hashlib.sha256(f"{request.method} {request.path}\n".encode() + raw).digest()
        async with conn.transaction():
            stored = await idempotency.lock_and_get(conn, principal, key)
            if stored is not None:
                return await _replay(conn, principal, stored, fingerprint)
            body = items.decode_items(raw)
            results = await engine.apply_in(conn, ctx, body)
            status, encoded = _rendered(principal, results, body)
            ids = [w.memory.id for w in results]
            await idempotency.save(conn, principal, key, fingerprint, status, encoded, ids)
    return web.Response(body=encoded, status=status, content_type="application/json")


def write_pools(app: web.Application) -> engine.Pools:
    """Where the write engine writes, from the app."""
    return engine.Pools(app[POOL], app[PLANNED_ONCE_POOL])


async def _replay(
    conn: asyncpg.Connection, principal: Principal, stored: idempotency.Stored, fingerprint: bytes
) -> web.Response:
    """The first answer to this key's request again, if it is the same request and its
    memories are all still readable by the caller."""
    if stored.request_sha256 != fingerprint:
        raise Conflict("This Idempotency-Key was already used with a different request body")
    if not await idempotency.replayable(conn, principal, stored):
        raise Conflict(
            "This Idempotency-Key's write cannot be replayed: a memory it returned has since "
            "been purged or is no longer readable by this key; nothing was written"
        )
    return web.Response(
        body=stored.response,
        status=stored.status,
        content_type="application/json",
        headers={"Idempotent-Replayed": "true"},
    )


def _rendered(
    principal: Principal, results: list[rules.Written], body: items.Batch
) -> tuple[int, bytes]:
    shown = [written_object(principal, w, new) for w, new in zip(results, body.items, strict=True)]
    if body.batch:
        return 200, _encoder.encode({"memories": shown})
    return (201 if results[0].created else 200), _encoder.encode(shown[0])


async def get_memory(request: web.Request) -> web.Response:
    memory_id = request.match_info["memory_id"]
    memory = await memories.get_readable(request.app[POOL], principal_of(request), memory_id)
    if memory is None:
        raise NotFound(f"Memory {memory_id!r} not found")
    return json_response(memory_object(memory))


async def patch_memory(request: web.Request) -> web.Response:
    columns = items.columns_of(await read_body(request, items.MemoryPatch))
    ctx = rules.WriteContext(principal_of(request))
    async with request.app[PLANNED_ONCE_POOL].acquire() as conn, conn.transaction():
        memory = await rules.patch(conn, ctx, request.match_info["memory_id"], columns)
    return json_response(memory_answer(ctx.principal, memory, set(columns)))


async def delete_memory(request: web.Request) -> web.Response:
    principal = principal_of(request)
    purge = request.query.get("purge", "").lower()
    if purge not in ("", "true", "false"):
        raise Invalid("purge must be true or false", param="purge")
    memory_id = request.match_info["memory_id"]
    pool = request.app[PLANNED_ONCE_POOL]
    if purge != "true":
        deleted = await delete_one(pool, principal, memory_id)
        return json_response(memory_answer(principal, deleted, set()))
    if "admin" not in principal.scopes:
        raise Forbidden("Purging a memory needs the 'admin' scope")
    async with pool.acquire() as conn, conn.transaction():
        await rules.purge(conn, rules.WriteContext(principal), memory_id)
    return json_response({"id": memory_id, "purged": True})


async def delete_one(pool: asyncpg.Pool, principal: Principal, memory_id: str) -> Memory:
    """Delete a memory the caller can read (a tombstone, ``rules.delete``): as it is left."""
    async with pool.acquire() as conn, conn.transaction():
        return await rules.delete(conn, rules.WriteContext(principal), memory_id)


def versions_page(query: Query) -> tuple[int, str | None]:
    """A versions page's ``limit`` (1-100, default 50: else a 400) and the version its
    ``cursor`` names (a cursor that is not one of ours is ignored, as the browse face's)."""
    raw = query.get("limit") or None
    limit = VERSIONS_LIMIT if raw is None else fields.query_int(raw)
    if limit is None or not 1 <= limit <= VERSIONS_MAX_LIMIT:
        raise Invalid(
            f"limit must be an integer from 1 to {VERSIONS_MAX_LIMIT}, got {(raw or '')[:40]!r}",
            param="limit",
        )
    return limit, _version_cursor(query.get("cursor") or "")


def _cursor_of(version_id: str) -> str:
    return base64.urlsafe_b64encode(version_id.encode()).decode().rstrip("=")


def _version_cursor(cursor: str) -> str | None:
    try:
        version_id = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return version_id if VERSION_ID.fullmatch(version_id) else None


async def versions_body(
    pool: asyncpg.Pool,
    principal: Principal,
    memory_id: str,
    query: Query,
    *,
    with_text: bool = False,
) -> dict[str, Any]:
    """A page of a memory's versions, newest first, as both faces show them; ``with_text``:
    each with the memory's text as that version left it (the write API's ``?include=text``),
    null where the caller could not read the memory in that version's scope."""
    limit, before = versions_page(query)
    versions, has_more = await memories.list_versions(pool, principal, memory_id, before, limit)
    return {
        "data": [
            {
                "id": ver.id,
                "operation": ver.operation,
                "actor": ver.actor,
                "content_sha256": ver.content_sha256,
                "path": ver.path,
                "status": ver.status,
                "created_at": iso(ver.created_at),
                **({"text": ver.text} if with_text else {}),
            }
            for ver in versions
        ],
        "has_more": has_more,
        "next_cursor": _cursor_of(versions[-1].id) if has_more else None,
    }


async def list_versions(request: web.Request) -> web.Response:
    principal = principal_of(request)
    memory_id = request.match_info["memory_id"]
    include = request.query.get("include", "")
    if include not in ("", "text"):
        raise Invalid(f"include may only be 'text', got {include!r}", param="include")
    pool = request.app[READ_POOL]  # may lag the primary (MNEME_READ_DATABASE_URL)
    if await memories.get_readable(pool, principal, memory_id) is None:
        raise NotFound(f"Memory {memory_id!r} not found")
    body = await versions_body(pool, principal, memory_id, request.query, with_text=bool(include))
    return json_response(body)


async def get_media(request: web.Request) -> web.Response:
    memory_id = request.match_info["memory_id"]
    found = await memories.get_media(request.app[POOL], principal_of(request), memory_id)
    if found is None:
        raise NotFound(f"Memory {memory_id!r} has no media")
    data, media_type = found
    # A browser may keep it an hour, but only for the key that fetched it: another key in
    # the same browser asks the service, which checks what that key may read.
    cache = {"Cache-Control": "private, max-age=3600", "Vary": "Authorization, X-API-Key"}
    return web.Response(body=data, content_type=media_type, headers=cache)
