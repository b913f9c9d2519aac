"""``POST /api/v1/memory/search``: parse, look up the store, answer (from the cache,
``cache``, or by retrieval, ``retrieve``), bill (``billing``).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import msgspec
from aiohttp import web

from embeddings import Embedder
from embeddings.batcher import Vector
from service.app_keys import (
    EMBEDDER,
    METER,
    PLANNED_ONCE_POOL,
    READ_PLANNED_ONCE_POOL,
    SNAPSHOTS,
    TOUCHER,
)
from service.faces.search import billing, cache
from service.faces.search.models import MemoryModel, pick_model
from service.faces.search.request import MAX_QUERY_BYTES, SearchRequest, parse_request
from service.faces.search.retrieve import retrieve_and_render
from service.http.inputs import body_of
from service.http.middleware import phase, principal_of
from service.problems import NotFound, Unavailable
from service.queries import memories as memories_sql
from service.queries import search as search_sql
from service.queries.memories import Store
from service.queries.search import Profile
from service.retrieval import snapshots

# A body larger than this is not read before its key is checked.
PREFETCH_MAX_BODY = 64 * 1024


async def prefetch(request: web.Request) -> None:
    """While the key is checked: read the body and start encoding the query, so the
    model's ~3 ms overlap the key check and the store lookup. Nothing here changes
    anything or answers anyone; any problem is left for the handler to find and report."""
    queries = request.app[EMBEDDER].queries
    if queries is None or not 0 < (request.content_length or 0) <= PREFETCH_MAX_BODY:
        return
    try:
        body = msgspec.json.decode(await body_of(request))
    except Exception:
        return
    if not isinstance(body, dict) or body.get("cache_control") is not None:
        return  # a cacheable search may need no vector
    query = body.get("query")
    if isinstance(query, str) and query.strip() and len(query) <= MAX_QUERY_BYTES:
        encoding = asyncio.ensure_future(queries.encode(query))
        # Taken up by the handler's own encode of the same text (the encoder shares texts
        # in flight); a failure is the handler's to meet, not the log's.
        encoding.add_done_callback(lambda f: f.cancelled() or f.exception())


async def search(request: web.Request) -> web.Response:
    model = pick_model(request.headers.get("X-WOS-Model"))
    req = parse_request(await body_of(request), model, request.headers.get("X-WOS-Form"))
    # The model encodes the query while the store is looked up (~1 ms saved of each
    # search). Not for a cacheable search: a cache hit needs no vector.
    queries = request.app[EMBEDDER].queries
    early = None
    if req.cache is None and queries is not None:
        early = asyncio.ensure_future(queries.encode(req.query))
    try:
        return await _search(request, model, req, early)
    finally:
        if early is not None:
            # Not needed (a 404): stop waiting. The model still finishes the batch it is
            # in, and its cache keeps the vector. No-op once done.
            early.cancel()
            if early.done() and not early.cancelled():
                early.exception()  # retrieved: a failure here was answered already


async def _search(
    request: web.Request,
    model: MemoryModel,
    req: SearchRequest,
    early: asyncio.Future[Vector] | None,
) -> web.Response:
    principal = principal_of(request)
    store, profile, snapshot, reader = await _store_of(request, req)
    # The cache lives on the primary, looked up by key on connections that plan once
    # (service.ops.db.PLANNED_ONCE_SETTINGS); an entry is valid while the store is unchanged.
    # A hit needs no model (the same query: the entry's token count), so it is answered
    # while the model is still loading.
    pool = request.app[PLANNED_ONCE_POOL]
    key, entry = None, None
    if req.cache is not None:
        key = cache.key_of(principal, store.id, model.name, req)
        entry = await cache.entry_for(pool, key, store.version)
        if entry is not None and entry.query == req.query:
            units = billing.hit_units(entry.query_tokens, entry.result_tokens)
            return _respond(request, req, store.id, entry.memory_ids, entry.response, "hit", units)
    embedder = _embedder(request)
    query_tokens = 0 if req.cache is None else embedder.count_tokens(req.query)

    body, delivered = await retrieve_and_render(
        request, model, req, store, profile, reader, early, snapshot
    )
    if req.cache is None:
        queries = request.app[EMBEDDER].queries
        assert queries is not None
        query_tokens = billing.query_tokens_of(queries, embedder, req.query)
    started = time.perf_counter()
    encoded = msgspec.json.encode(body)
    returned = [c.id for c in delivered]
    result_tokens = billing.result_tokens_of(delivered, embedder)
    phase(request, "bill", time.perf_counter() - started)
    if req.cache is None or key is None:
        units = billing.miss_units(query_tokens, result_tokens)
        return _respond(request, req, store.id, returned, encoded, "miss", units)
    prefix = cache.prefix_tokens(entry, req.query)
    units = billing.write_units(req.cache, query_tokens, result_tokens, prefix)
    await cache.write(
        pool, key, req.cache, query=req.query, query_tokens=query_tokens,
        result_tokens=result_tokens, store_version=store.version, memory_ids=returned,
        response=encoded,
    )  # fmt: skip
    return _respond(request, req, store.id, returned, encoded, "write", units)


async def _store_of(
    request: web.Request, req: SearchRequest
) -> tuple[Store, Profile, snapshots.Snapshot | None, snapshots.Reader]:
    """The store, its profile, its snapshot (if one is exact for its version) and the
    reader; a 404 for a store or speaker not found.

    The store and its speaker are looked up by key: planned once
    (service.ops.db.PLANNED_ONCE_SETTINGS). The store and everything retrieved from it are
    read where reads go (a standby, with MNEME_READ_DATABASE_URL): one consistent view,
    whose store version keys the snapshot and the cache."""
    principal = principal_of(request)
    read = request.app[READ_PLANNED_ONCE_POOL]
    held_snapshots = request.app[SNAPSHOTS]
    started = time.perf_counter()
    # The lookup also says which scopes of the snapshot the store had last time the key
    # may read: if it is still that store at that version, no other statement is needed.
    guess = held_snapshots.guess(principal.workspace_id, req.store_ref)
    found = await search_sql.store_and_profile(
        read, principal.workspace_id, req.store_ref, req.query, reader=principal,
        scopes=guess.scopes if guess is not None else (),
    )  # fmt: skip
    phase(request, "store", time.perf_counter() - started)
    if found is None:
        raise NotFound(f"Store {req.store_ref!r} not found")
    store, profile = found
    # A small store unchanged since its snapshot was read is ranked from the snapshot; a
    # changed one by the SQL arms, while a new snapshot is read in the background.
    snapshot = None
    if search_sql.planned_once(profile) and profile.docs > 0:
        snapshot = held_snapshots.fresh(
            principal.workspace_id, req.store_ref, store.id, store.version
        )
    scopes = profile.readable_scopes if snapshot is not None and snapshot is guess else None
    if req.speaker is not None and not await memories_sql.speaker_exists(
        read, principal.workspace_id, store.id, req.speaker
    ):
        raise NotFound(f"Speaker {req.speaker!r} is not registered in store {store.name!r}")
    return store, profile, snapshot, snapshots.Reader(principal, scopes)


def _embedder(request: web.Request) -> Embedder:
    """The embedding model; a 503 while it is still loading."""
    slot = request.app[EMBEDDER]
    if slot.queries is None or slot.embedder is None:
        raise Unavailable(
            "The embedding model is still loading; retry in a few seconds", retry_after=5
        )
    return slot.embedder


def _respond(
    request: web.Request, req: SearchRequest, store_id: str, ids: list[str], body: bytes,
    cache_header: str, units: float,
) -> web.Response:  # fmt: skip
    """Bill the search and stamp what it returned, both written off the response path
    (the toucher's wake also flushes the meter); the response, ``body`` with this
    request's warnings (``with_warnings``)."""
    workspace_id = principal_of(request).workspace_id
    request.app[METER].add(workspace_id, "search", units)
    _stamp_used(request, workspace_id, store_id, ids)
    return web.Response(
        body=with_warnings(body, req.warnings), content_type="application/json",
        headers={"X-Cache": cache_header, "X-Usage-Units": f"{units:.4f}"},
    )  # fmt: skip


def with_warnings(body: bytes, warnings: list[str]) -> bytes:
    """``body`` (an encoded JSON object) with ``warnings`` last. A cached answer is
    stored without them: they belong to the request that reads it (a typo in one is not
    another's), and the cache key leaves out the unknown fields they name."""
    if not warnings:
        return body
    return body[:-1] + b',"warnings":' + msgspec.json.encode(warnings) + b"}"


def _stamp_used(request: web.Request, workspace_id: str, store_id: str, ids: list[str]) -> None:
    """``last_used_at = now()`` for what a search returned: written off the response path
    (the toucher), and at once in this instance's snapshot of the store."""
    request.app[TOUCHER].add(workspace_id, ids)
    request.app[SNAPSHOTS].touch(workspace_id, store_id, ids, datetime.now(UTC))
