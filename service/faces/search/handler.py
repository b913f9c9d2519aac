"""``POST /api/v1/memory/search``: parse, one call into the search engine
(``service.retrieval.engine.search``: the store, the answer cache or retrieval, billing),
render its answer with the ``X-Cache`` and ``X-Usage-Units`` headers. ``prefetch`` starts
encoding the query while the key is checked.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

import msgspec
from aiohttp import web

from service.app_keys import (
    EMBEDDER,
    METER,
    METRICS,
    PLANNED_ONCE_POOL,
    READ_PLANNED_ONCE_POOL,
    READ_POOL,
    SNAPSHOTS,
    SPEAKER_NAMES,
    TOUCHER,
)
from service.faces.search.request import MAX_QUERY_BYTES, parse_request
from service.http.inputs import body_of
from service.http.middleware import phase, principal_of
from service.queries.keys import Principal
from service.retrieval import engine
from service.retrieval.deps import SearchDeps, untimed
from service.retrieval.memory_models import MemoryModel, pick_model
from service.retrieval.search_request import SearchRequest

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
    """Parse, one call into the search engine, render the answer with its headers."""
    model = pick_model(request.headers.get("X-WOS-Model"))
    req = parse_request(await body_of(request), model, request.headers.get("X-WOS-Form"))
    deps = search_deps(request.app, functools.partial(phase, request))
    answer = await search_early(deps, principal_of(request), model, req)
    return web.Response(
        body=with_warnings(answer.body, req.warnings),
        content_type="application/json",
        headers={"X-Cache": answer.cache, "X-Usage-Units": f"{answer.units:.4f}"},
    )


async def search_early(
    deps: SearchDeps, principal: Principal, model: MemoryModel, req: SearchRequest
) -> engine.Answer:
    """``engine.search``, the query's vector started first: the model encodes it while
    the store is looked up (~1 ms saved of each search). Not for a cacheable search: a
    cache hit needs no vector."""
    early = None
    if req.cache_ttl is None and deps.queries is not None:
        early = asyncio.ensure_future(deps.queries.encode(req.query))
    try:
        return await engine.search(deps, principal, model, req, early)
    finally:
        if early is not None:
            # Not needed (a 404): stop waiting. The model still finishes the batch it is
            # in, and its cache keeps the vector. No-op once done.
            early.cancel()
            if early.done() and not early.cancelled():
                early.exception()  # retrieved: a failure here was answered already


def search_deps(app: web.Application, phase: Callable[[str, float], None] = untimed) -> SearchDeps:
    """What the search engine runs on, from the app (``phase``: where its spans go)."""
    slot = app[EMBEDDER]
    return SearchDeps(
        cache_pool=app[PLANNED_ONCE_POOL],
        read_pool=app[READ_POOL],
        read_planned_once_pool=app[READ_PLANNED_ONCE_POOL],
        embedder=slot.embedder,
        queries=slot.queries,
        snapshots=app[SNAPSHOTS],
        speaker_names=app[SPEAKER_NAMES],
        meter=app[METER],
        toucher=app[TOUCHER],
        metrics=app[METRICS],
        phase=phase,
    )


def with_warnings(body: bytes, warnings: list[str]) -> bytes:
    """``body`` (an encoded JSON object) with ``warnings`` last. A cached answer is
    stored without them: they belong to the request that reads it (a typo in one is not
    another's), and the cache key leaves out the unknown fields they name."""
    if not warnings:
        return body
    return body[:-1] + b',"warnings":' + msgspec.json.encode(warnings) + b"}"
