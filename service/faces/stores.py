"""Memory Store face (seed 003, SPEC §3.4): stores, and memories addressed by path.

Memories written here are ordinary memories (tier ``core`` by default): the same write
path, versions, embedding and search. Error bodies on these routes carry exactly
``type`` and ``message`` (the route table's ``plain_errors``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg
import msgspec
from aiohttp import web
from msgspec import UNSET, UnsetType

from service.app_keys import PLANNED_ONCE_POOL, POOL, READ_POOL
from service.faces.memories import versions_body
from service.http.inputs import read_body
from service.http.json import json_response
from service.http.middleware import principal_of
from service.ids import is_name
from service.problems import Conflict, Invalid, NotFound
from service.queries import memories, stores
from service.queries.keys import Principal
from service.queries.memories import Memory, Store
from service.times import iso
from service.write import engine, fields, items, rules

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
Query = Mapping[str, str]  # a request's query parameters


class StoreCreate(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    description: str = ""
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    strip_temporal: bool = False


class StoreUpdate(msgspec.Struct, forbid_unknown_fields=True):
    name: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    metadata: dict[str, str] | UnsetType = UNSET
    strip_temporal: bool | UnsetType = UNSET


class PathMemoryCreate(msgspec.Struct, forbid_unknown_fields=True):
    path: str
    content: str
    metadata: dict[str, str] = msgspec.field(default_factory=dict)


class PathMemoryUpdate(msgspec.Struct, forbid_unknown_fields=True):
    content: str | UnsetType = UNSET
    metadata: dict[str, str] | UnsetType = UNSET
    path: str | UnsetType = UNSET
    content_sha256: str | UnsetType = UNSET


def store_object(s: Store) -> dict[str, Any]:
    return {
        "id": s.id,
        "type": "memory_store",
        "name": s.name,
        "description": s.description,
        "metadata": s.metadata,
        "strip_temporal": s.strip_temporal,
        "created_at": iso(s.created_at),
        "updated_at": iso(s.updated_at),
    }


def entry_object(e: stores.Entry | Memory, store_id: str) -> dict[str, Any]:
    assert e.path is not None
    return {
        "id": e.id,
        "type": "memory",
        "memory_store_id": store_id,
        "path": e.path,
        "content_size_bytes": e.content_size_bytes,
        "content_sha256": e.content_sha256,
        "metadata": e.metadata,
        "created_at": iso(e.created_at),
        "updated_at": iso(e.updated_at),
    }


def full_object(m: Memory) -> dict[str, Any]:
    out = entry_object(m, m.store_id)
    out["content"] = m.text
    # The seed's key order, with content beside the path.
    order = [
        "id",
        "type",
        "memory_store_id",
        "path",
        "content",
        "content_size_bytes",
        "content_sha256",
        "metadata",
        "created_at",
        "updated_at",
    ]
    return {k: out[k] for k in order}


def parse_limit(query: Query) -> int:
    raw = query.get("limit")
    if raw is None or raw == "":
        return DEFAULT_LIMIT
    value = fields.query_int(raw)
    if value is None or not 1 <= value <= MAX_LIMIT:
        raise Invalid(f"limit must be an integer from 1 to {MAX_LIMIT}, got {raw[:40]!r}")
    return value


def paging_ids(query: Query) -> tuple[str | None, str | None]:
    after = query.get("after_id") or None
    before = query.get("before_id") or None
    if after is not None and before is not None:
        raise Invalid("after_id and before_id are mutually exclusive")
    return after, before


def page(data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    return {
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }


async def the_store(request: web.Request, *, read: bool = False) -> Store:
    """The store the path names (``find_store``)."""
    principal = principal_of(request)
    return await find_store(request.app, principal, request.match_info["store_id"], read=read)


async def find_store(
    app: web.Application, principal: Principal, ref: str, *, read: bool = False
) -> Store:
    """The caller's workspace's store by id or name; ``read``: for a read that may lag the
    primary (from MNEME_READ_DATABASE_URL's standby, if set), not for a write."""
    pool = app[READ_POOL if read else POOL]
    store = await memories.resolve_store(pool, principal.workspace_id, ref)
    if store is None:
        raise NotFound(f"Memory store {ref!r} not found")
    return store


def check_store_fields(name: str | None, metadata: dict[str, str] | None) -> None:
    if name is not None and not is_name(name):
        raise Invalid(
            f"Invalid store name {name!r}: 1-64 characters of A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit"
        )
    if metadata is not None:
        fields.check_metadata(metadata)


# --- stores -------------------------------------------------------------------------------


async def create_store(request: web.Request) -> web.Response:
    body = await read_body(request, StoreCreate)
    check_store_fields(body.name, body.metadata)
    store = await stores.create_store(
        request.app[POOL],
        principal_of(request).workspace_id,
        body.name,
        body.description,
        body.metadata,
        body.strip_temporal,
    )
    if store is None:
        raise Conflict(f"A memory store named {body.name!r} already exists")
    return json_response(store_object(store), status=201)


async def list_stores(request: web.Request) -> web.Response:
    limit = parse_limit(request.query)
    after, before = paging_ids(request.query)
    pool, workspace_id = request.app[READ_POOL], principal_of(request).workspace_id
    anchor = after or before
    if anchor is not None and not await stores.store_exists(pool, workspace_id, anchor):
        name = "after_id" if after else "before_id"
        raise Invalid(f"{name} {anchor!r} is not a store of this workspace")
    found, has_more = await stores.list_stores(
        pool, workspace_id, after=after or "", before=before, limit=limit
    )
    return json_response(page([store_object(s) for s in found], has_more))


async def get_store(request: web.Request) -> web.Response:
    return json_response(store_object(await the_store(request, read=True)))


async def update_store(request: web.Request) -> web.Response:
    body = await read_body(request, StoreUpdate)
    store = await the_store(request)
    name = store.name if body.name is UNSET else body.name
    metadata = store.metadata if body.metadata is UNSET else body.metadata
    check_store_fields(name, metadata)
    if store.name.lower() == "default" and name.lower() != "default":
        raise Conflict("The default store cannot be renamed")
    try:
        updated = await stores.update_store(
            request.app[POOL],
            principal_of(request).workspace_id,
            store,
            name,
            store.description if body.description is UNSET else body.description,
            metadata,
            store.strip_temporal if body.strip_temporal is UNSET else body.strip_temporal,
        )
    except asyncpg.UniqueViolationError:
        raise Conflict(f"A memory store named {name!r} already exists") from None
    if updated is None:  # deleted since it was looked up
        raise NotFound(f"Memory store {store.id!r} not found")
    return json_response(store_object(updated))


async def delete_store(request: web.Request) -> web.Response:
    force = request.query.get("force", "").lower()
    if force not in ("", "true", "false"):
        raise Invalid("force must be true or false")
    store = await the_store(request)
    if store.name.lower() == "default":
        raise Conflict("The default store cannot be deleted")
    workspace = principal_of(request).workspace_id
    async with request.app[POOL].acquire() as conn, conn.transaction():
        # No count in the message: it would include memories the caller cannot read.
        if force != "true" and await stores.has_active(conn, workspace, store.id):
            raise Conflict(
                f"Memory store {store.name!r} still holds active memories; "
                "delete them first or pass force=true"
            )
        await stores.delete_store(conn, workspace, store.id)
    return json_response({"id": store.id, "type": "memory_store_deleted"})


# --- memories -----------------------------------------------------------------------------
# Each handler parses, then calls the function below it, which the MCP door's file tools
# call too (``service.faces.mcp_engine``).


async def create_memory(request: web.Request) -> web.Response:
    body = await read_body(request, PathMemoryCreate)
    principal, ref = principal_of(request), request.match_info["store_id"]
    return json_response(await create_path_memory(request.app, principal, ref, body), status=201)


async def create_path_memory(
    app: web.Application, principal: Principal, store_ref: str, body: PathMemoryCreate
) -> dict[str, Any]:
    """Write a memory at a path of a store: the memory."""
    fields.check_text(body.content, "content")
    store = await find_store(app, principal, store_ref)
    ctx = rules.WriteContext(principal, default_tier="core")
    item = items.MemoryIn(text=body.content, path=body.path, metadata=body.metadata, store=store.id)
    pools = engine.Pools(app[POOL], app[PLANNED_ONCE_POOL])
    [written] = await engine.apply(pools, ctx, items.Batch([items.new_memory(item)]))
    return full_object(written.memory)


async def _path_memory(
    conn: asyncpg.Connection | asyncpg.Pool,
    principal: Principal,
    store: Store,
    memory_id: str,
    *,
    for_update: bool = False,
) -> Memory:
    memory = await memories.get_readable(conn, principal, memory_id, for_update=for_update)
    if (
        memory is None
        or memory.store_id != store.id
        or memory.path is None
        or memory.status == "deleted"
    ):
        raise NotFound(f"Memory {memory_id!r} not found in memory store {store.id!r}")
    return memory


async def get_memory(request: web.Request) -> web.Response:
    principal, ref = principal_of(request), request.match_info["store_id"]
    memory_id = request.match_info["memory_id"]
    return json_response(await read_path_memory(request.app, principal, ref, memory_id))


async def read_path_memory(
    app: web.Application, principal: Principal, store_ref: str, memory_id: str
) -> dict[str, Any]:
    """A memory of a store, with its content (from the read pool)."""
    store = await find_store(app, principal, store_ref, read=True)
    return full_object(await _path_memory(app[READ_POOL], principal, store, memory_id))


async def update_memory(request: web.Request) -> web.Response:
    body = await read_body(request, PathMemoryUpdate)
    principal, ref = principal_of(request), request.match_info["store_id"]
    memory_id = request.match_info["memory_id"]
    return json_response(await update_path_memory(request.app, principal, ref, memory_id, body))


async def update_path_memory(
    app: web.Application,
    principal: Principal,
    store_ref: str,
    memory_id: str,
    body: PathMemoryUpdate,
) -> dict[str, Any]:
    """Change a memory of a store, under its ``content_sha256`` precondition if given."""
    if body.content is not UNSET:
        fields.check_text(body.content, "content")
    if body.metadata is not UNSET:
        fields.check_metadata(body.metadata)
    store = await find_store(app, principal, store_ref)
    async with app[PLANNED_ONCE_POOL].acquire() as conn, conn.transaction():
        memory = await _path_memory(conn, principal, store, memory_id, for_update=True)
        if body.path is not UNSET and body.path != memory.path:
            raise Invalid("path is immutable: write a new memory at the new path instead")
        if _changes(memory, body, principal.reads):
            patch = items.MemoryPatch(text=body.content, metadata=body.metadata)
            memory = await rules.patch(
                conn, rules.WriteContext(principal), memory.id, items.columns_of(patch)
            )
    full = full_object(memory)
    return full if principal.reads else _receipt(full, body)


def _receipt(full: dict[str, Any], body: PathMemoryUpdate) -> dict[str, Any]:
    """What a key that may write but not read sees of the memory it updated: which one,
    and what it sent (SPEC §9)."""
    shown = {"id", "type", "memory_store_id"}
    if body.content is not UNSET:
        shown |= {"content", "content_size_bytes", "content_sha256"}
    if body.metadata is not UNSET:
        shown.add("metadata")
    return {k: v for k, v in full.items() if k in shown}


def _changes(memory: Memory, body: PathMemoryUpdate, reader: bool) -> bool:
    """Whether ``body`` changes ``memory``; a 409 if its precondition is stale."""
    content = memory.text if body.content is UNSET else body.content
    metadata = memory.metadata if body.metadata is UNSET else body.metadata
    unchanged = content == memory.text and metadata == memory.metadata
    stale = body.content_sha256 is not UNSET and body.content_sha256 != memory.content_sha256
    # A stale precondition is fine when the request is already the stored state (a
    # retry of an update that applied): answer as if it just did.
    if stale and not unchanged:
        stored = f" (stored: {memory.content_sha256})" if reader else ""
        raise Conflict(
            "content_sha256 does not match the stored content: it changed since you "
            f"read it{stored}"
        )
    return not unchanged


async def delete_memory(request: web.Request) -> web.Response:
    store = await the_store(request)
    principal = principal_of(request)
    ctx = rules.WriteContext(principal)
    async with request.app[PLANNED_ONCE_POOL].acquire() as conn, conn.transaction():
        memory = await _path_memory(
            conn, principal, store, request.match_info["memory_id"], for_update=True
        )
        await rules.delete(conn, ctx, memory.id)
    deleted = {"id": memory.id, "type": "memory_deleted", "memory_store_id": store.id}
    # The path is a stored field: only a key that may read it is told.
    return json_response({**deleted, "path": memory.path} if principal.reads else deleted)


async def list_versions(request: web.Request) -> web.Response:
    store = await the_store(request, read=True)
    principal = principal_of(request)
    pool = request.app[READ_POOL]
    memory = await _path_memory(pool, principal, store, request.match_info["memory_id"])
    return json_response(await versions_body(pool, principal, memory.id, request.query))


async def list_memories(request: web.Request) -> web.Response:
    principal, ref = principal_of(request), request.match_info["store_id"]
    return json_response(await list_path_memories(request.app, principal, ref, request.query))


async def list_path_memories(
    app: web.Application, principal: Principal, store_ref: str, query: Query
) -> dict[str, Any]:
    """A page of a store's memories by path, for these query parameters (no content)."""
    limit = parse_limit(query)
    after, before = paging_ids(query)
    store = await find_store(app, principal, store_ref, read=True)
    pool = app[READ_POOL]
    anchor: str | None = None
    if after is not None or before is not None:
        anchor_id = after or before
        assert anchor_id is not None
        anchor = await stores.path_of(pool, principal, store.id, anchor_id)
        if anchor is None:
            name = "after_id" if after else "before_id"
            raise Invalid(f"{name} {anchor_id!r} is not a memory of this store")
    entries, has_more = await stores.list_entries(
        pool,
        principal,
        store.id,
        prefix=query.get("path_prefix", ""),
        after=None if anchor is None or after is None else (anchor, after),
        before=None if anchor is None or before is None else (anchor, before),
        limit=limit,
    )
    return page([entry_object(e, store.id) for e in entries], has_more)
