"""``POST /api/v1/memory/search``: parse, look up the store, answer (from the cache or by
retrieval), bill.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from datetime import UTC, datetime
from typing import Any

import msgspec
from aiohttp import web

from embeddings.batcher import Vector
from service.app_keys import (
    EMBEDDER,
    METER,
    METRICS,
    PLANNED_ONCE_POOL,
    READ_PLANNED_ONCE_POOL,
    READ_POOL,
    SNAPSHOTS,
    TOUCHER,
)
from service.faces.search.billing import TTL_S, WRITE_RATE, options_key, result_tokens_of
from service.faces.search.models import MemoryModel, pick_model
from service.faces.search.render import render
from service.faces.search.request import MAX_QUERY_BYTES, SearchRequest, parse_request
from service.http.errors import ApiError, not_found
from service.http.inputs import body_of
from service.http.middleware import phase, principal_of
from service.ops import db
from service.queries import cache
from service.queries import memories as q
from service.queries import search as sq
from service.queries.search import Candidate, SearchFilters
from service.retrieval import ranking, snapshots
from service.retrieval.verify import VERIFY_DEPTH, verify_passes

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
    # The store, its speaker and the cache are looked up by key: planned once
    # (service.ops.db.PLANNED_ONCE_SETTINGS). The store and everything retrieved from it are
    # read where reads go (a standby, with MNEME_READ_DATABASE_URL): one consistent view,
    # whose store version keys the snapshot and the cache; the cache lives on the primary.
    pool = request.app[PLANNED_ONCE_POOL]
    read = request.app[READ_PLANNED_ONCE_POOL]
    held = request.app[SNAPSHOTS]
    started = time.perf_counter()
    # The lookup also says which scopes of the snapshot the store had last time the key
    # may read: if it is still that store at that version, no other statement is needed.
    guess = held.guess(principal.workspace_id, req.store_ref)
    found = await sq.store_and_profile(
        read, principal.workspace_id, req.store_ref, req.query, reader=principal,
        scopes=guess.scopes if guess is not None else (),
    )  # fmt: skip
    phase(request, "store", time.perf_counter() - started)
    if found is None:
        raise not_found(f"Store {req.store_ref!r} not found")
    store, stats = found
    # A small store unchanged since its snapshot was read is ranked from the snapshot; a
    # changed one by the SQL arms, while a new snapshot is read in the background.
    snap = None
    if sq.planned_once(stats) and stats.docs > 0:
        snap = held.fresh(principal.workspace_id, req.store_ref, store.id, store.version)
    reader = snapshots.Reader(
        principal, stats.readable_scopes if snap is not None and snap is guess else None
    )
    if req.speaker is not None and not await q.speaker_exists(
        read, principal.workspace_id, store.id, req.speaker
    ):
        raise not_found(f"Speaker {req.speaker!r} is not registered in store {store.name!r}")

    slot = request.app[EMBEDDER]
    if slot.queries is None or slot.embedder is None:
        raise ApiError(503, "The embedding model is still loading; retry in a few seconds",
                       headers={"Retry-After": "5"})  # fmt: skip
    embedder = slot.embedder

    # The cache: one entry per (store, model, options, reader); valid while the store is
    # unchanged.
    visibility = hashlib.sha256(principal.visibility.encode()).digest()
    cache_key = cache.CacheKey(
        principal.workspace_id, store.id, model.name, options_key(req), visibility
    )
    entry = None
    query_tokens = 0
    if req.cache is not None:
        query_tokens = embedder.count_tokens(req.query)
        entry = await cache.cached(pool, cache_key)
        if entry is not None and entry.store_version != store.version:
            entry = None
        if entry is not None and entry.query == req.query:
            units = 0.1 * (query_tokens + entry.result_tokens)
            request.app[METER].add(principal.workspace_id, "search", units)
            _used(request, principal.workspace_id, store.id, entry.memory_ids)
            return web.Response(
                body=entry.response, content_type="application/json",
                headers={"X-Cache": "hit", "X-Usage-Units": f"{units:.4f}"},
            )  # fmt: skip

    body, delivered = await answer(request, model, req, store, stats, reader, early, snap)
    if req.cache is None:  # counted with the encoding, off the event loop, if it was encoded
        counted = slot.queries.tokens(req.query)
        query_tokens = embedder.count_tokens(req.query) if counted is None else counted
    started = time.perf_counter()
    encoded = msgspec.json.encode(body)
    returned = [c.id for c in delivered]
    result_tokens = result_tokens_of(delivered, embedder)
    phase(request, "bill", time.perf_counter() - started)
    if req.cache is None:
        units, cache_header = query_tokens + result_tokens, "miss"
    else:
        rate = WRITE_RATE[req.cache]
        cached_part = (
            entry.query_tokens if entry is not None and req.query.startswith(entry.query) else 0
        )
        units = 0.1 * cached_part + rate * (query_tokens - cached_part) + result_tokens
        cache_header = "write"
        await cache.put_cached(
            pool, cache_key,
            cache.Cached(req.query, query_tokens, result_tokens, store.version, returned, encoded,
                         datetime.now(UTC)),
            TTL_S[req.cache],
        )  # fmt: skip
    request.app[METER].add(principal.workspace_id, "search", units)
    # Both are written off the response path; the toucher's wake also flushes the meter.
    _used(request, principal.workspace_id, store.id, returned)
    return web.Response(
        body=encoded, content_type="application/json",
        headers={"X-Cache": cache_header, "X-Usage-Units": f"{units:.4f}"},
    )  # fmt: skip


def _used(request: web.Request, workspace_id: str, store_id: str, ids: list[str]) -> None:
    """``last_used_at = now()`` for what a search returned: written off the response path
    (the toucher), and at once in this instance's snapshot of the store."""
    request.app[TOUCHER].add(workspace_id, ids)
    request.app[SNAPSHOTS].touch(workspace_id, store_id, ids, datetime.now(UTC))


async def answer(
    request: web.Request,
    model: MemoryModel,
    req: SearchRequest,
    store: q.Store,
    stats: sq.Profile,
    reader: snapshots.Reader,
    early: asyncio.Future[Vector] | None = None,
    snap: snapshots.Snapshot | None = None,
) -> tuple[dict[str, Any], list[Candidate]]:
    """Retrieve and render; returns the body and the memories it delivers. ``early``:
    the query's vector, already being computed; ``snap``: the store's snapshot, exact for
    its version."""
    principal = reader.principal
    # Exact scans run on connections that plan once (service.ops.db.PLANNED_ONCE_SETTINGS).
    pool = request.app[READ_PLANNED_ONCE_POOL if sq.planned_once(stats) else READ_POOL]
    slot = request.app[EMBEDDER]
    assert slot.queries is not None
    now = datetime.now(UTC)
    per_arm = max(60, 4 * req.max_results)
    named = ranking.named_speaker(req.query, stats.speakers) if model.features else None
    self_mode = model.self_apart
    wants_self = req.speaker == "me" and self_mode
    # verify's passes draw on one retrieval, a little deeper than a plain one.
    depth = max(per_arm, VERIFY_DEPTH) if req.verify else per_arm
    # The main retrieval: everything but the agent's own words and images, when those
    # are answered apart.
    main_self_only = False if self_mode else None
    main_images = False if model.images else None

    async with db.LazyConnection(pool) as lazy:

        async def retrieve(
            *,
            subset: str,
            self_only: bool | None,
            images: bool | None,
            speaker: str | None,
            filters: SearchFilters,
            vector: Vector,
            depth: int = per_arm,
            ranks: dict[str, float] | None = None,
        ) -> list[tuple[Candidate, float]]:
            """The subset's candidates, ranked best first with their scores (``ranks``:
            its full-text arm's, when already asked for)."""
            if stats.size(subset) == 0:
                return []  # nothing of that kind in the store: no need to ask
            found, path = None, "sql"
            if snap is not None:
                path = "snapshot" if snapshots.in_memory(reader, filters) else "checked"
                found = await snapshots.candidates(
                    lazy.get, snap, reader, store.id, stats, vector, filters, per_arm=depth,
                    subset=subset, speaker=speaker, self_only=self_only, images=images,
                    use_fts=model.fuse_text,
                )  # fmt: skip
            if found is None:
                path = "sql"
                found = await sq.candidates(
                    await lazy.get(), principal, store.id, stats, vector, req.query, filters,
                    per_arm=depth, subset=subset, speaker=speaker, self_only=self_only,
                    images=images, use_fts=model.fuse_text, ranks=ranks,
                )  # fmt: skip
            request.app[METRICS].retrievals.labels(path).inc()
            return ranking.scored(
                found, fuse_text=model.fuse_text, use_features=model.features, now=now,
                speaker=named,
            )  # fmt: skip

        # The full-text arm needs no vector: it runs while the model encodes the query
        # (a snapshot's needs no SQL).
        ranks = None
        if snap is None and not wants_self and model.fuse_text and stats.size("all") > 0:
            started = time.perf_counter()
            retrieval, values = sq.plan(
                principal, store.id, stats, None, req.query, req.filters, per_arm=depth,
                subset="all", speaker=req.speaker, self_only=main_self_only,
                images=main_images,
            )  # fmt: skip
            ranks = await sq.text_ranks(await lazy.get(), retrieval, values)
            phase(request, "text", time.perf_counter() - started)
        started = time.perf_counter()  # "embed": the wait for the vector
        query_vector = await (early if early is not None else slot.queries.encode(req.query))
        phase(request, "embed", time.perf_counter() - started)
        started = time.perf_counter()

        memories: list[Candidate] = []
        verify_used = 0
        if not wants_self:
            ranked = await retrieve(
                subset="all", self_only=main_self_only, images=main_images,
                speaker=req.speaker, filters=req.filters, vector=query_vector, depth=depth,
                ranks=ranks,
            )  # fmt: skip
            memories = [c for c, _ in ranked[: req.max_results]]
            memories, verify_used = verify_passes(memories, ranked, req.max_results, req.verify)
        self_memories: list[Candidate] = []
        if self_mode:
            ranked = await retrieve(
                subset="self", self_only=True, images=None, speaker=None,
                filters=SearchFilters(), vector=query_vector,
            )  # fmt: skip
            self_memories = [c for c, _ in ranked[: req.max_results]]
        images: list[Candidate] = []
        if model.images and req.max_images:
            ranked = await retrieve(
                subset="images", self_only=None, images=True, speaker=None,
                filters=req.filters, vector=query_vector,
            )  # fmt: skip
            images = [c for c, _ in ranked[: req.max_images]]

    phase(request, "retrieve", time.perf_counter() - started)
    started = time.perf_counter()
    strip = store.strip_temporal
    body: dict[str, Any] = {"memories": [render(c, req, strip) for c in memories]}
    if model.images:
        body["images"] = [
            {**render(c, req, strip), "media_url": f"/api/v1/memories/{c.id}/media"} for c in images
        ]
    if self_mode:
        body["self_memories"] = [render(c, req, strip) for c in self_memories]
    if req.verify > 0:
        body["verify_used"] = verify_used
    if req.warnings:
        body["warnings"] = req.warnings
    phase(request, "render", time.perf_counter() - started)
    return body, memories + self_memories + images
