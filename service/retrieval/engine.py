"""The search engine: ``search(deps, principal, model, request)`` answers one search of
seed 002, whichever door asks (the search face, the MCP door's ``recall``), and bills it.

It takes checked values (a ``SearchRequest``, the caller's ``Principal``) and its
dependencies explicitly (``SearchDeps``: pools, the model, the snapshots, the batches
written off the response path), and raises ``service.problems``: no HTTP in it. The
steps: the store and its snapshot (one statement), the answer cache
(``answer_cache``), else retrieval (``retrieve``), then billing (``billing``: the units,
written off the response path by ``ops/meter.Meter``) and last-used stamps
(``ops/toucher.Toucher``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import msgspec

from embeddings import Embedder
from embeddings.batcher import QueryEncoder, Vector
from service.problems import NotFound, Unavailable
from service.queries import memories as memories_sql, search as search_sql
from service.queries.keys import Principal
from service.queries.memories import Store
from service.queries.search import Profile
from service.retrieval import answer_cache, billing, snapshots
from service.retrieval.deps import SearchDeps
from service.retrieval.memory_models import MemoryModel
from service.retrieval.retrieve import Target, retrieve_and_render
from service.retrieval.search_request import SearchRequest


@dataclass(frozen=True)
class Answer:
    """A search's answer: the encoded JSON object (without the request's warnings, which
    the face adds), whether the cache answered it (``hit``, ``miss``, ``write``), and the
    units billed for it."""

    body: bytes
    cache: str
    units: float
    memory_ids: list[str]


async def search(
    deps: SearchDeps,
    principal: Principal,
    model: MemoryModel,
    req: SearchRequest,
    early: asyncio.Future[Vector] | None = None,
) -> Answer:
    """Answer ``req`` for ``principal``, billed; ``early``: the query's vector, already
    being computed. A 404 for a store or speaker not found, 503 while the model loads."""
    store, profile, snapshot, reader = await _store_of(deps, principal, req)
    # The cache lives on the primary; an entry is valid while the store is unchanged. A
    # hit needs no model (the same query: the entry's token count), so it is answered
    # while the model is still loading.
    key, entry = None, None
    if req.cache_ttl is not None:
        key = answer_cache.key_of(principal, store.id, model.name, req)
        entry = await answer_cache.entry_for(deps.cache_pool, key, store.version)
        if entry is not None and entry.query == req.query:
            units = billing.hit_units(entry.query_tokens, entry.result_tokens)
            answer = Answer(entry.response, "hit", units, entry.memory_ids)
            return _billed(deps, principal, store.id, answer)
    embedder, queries = _model(deps)
    rendered = await retrieve_and_render(
        deps, queries, model, req, Target(store, profile, reader, snapshot), early
    )
    started = time.perf_counter()
    encoded = msgspec.json.encode(rendered.body)
    returned = [c.id for c in rendered.delivered]
    query_tokens = billing.query_tokens_of(queries, embedder, req.query)
    result_tokens = billing.result_tokens_of(rendered.delivered, embedder)
    deps.phase("bill", time.perf_counter() - started)
    if req.cache_ttl is None or key is None:
        units = billing.miss_units(query_tokens, result_tokens)
        return _billed(deps, principal, store.id, Answer(encoded, "miss", units, returned))
    prefix = answer_cache.prefix_tokens(entry, req.query)
    units = billing.write_units(req.cache_ttl, query_tokens, result_tokens, prefix)
    await answer_cache.write(
        deps.cache_pool,
        key,
        req.cache_ttl,
        query=req.query,
        query_tokens=query_tokens,
        result_tokens=result_tokens,
        store_version=store.version,
        memory_ids=returned,
        response=encoded,
    )
    return _billed(deps, principal, store.id, Answer(encoded, "write", units, returned))


async def _store_of(
    deps: SearchDeps, principal: Principal, req: SearchRequest
) -> tuple[Store, Profile, snapshots.Snapshot | None, snapshots.Reader]:
    """The store, its profile, its snapshot (if one is exact for its version) and the
    reader; a 404 for a store or speaker not found.

    The store and its speaker are looked up by key: planned once
    (service.ops.db.PLANNED_ONCE_SETTINGS). The store and everything retrieved from it are
    read where reads go (a standby, with MNEME_READ_DATABASE_URL): one consistent view,
    whose store version keys the snapshot and the cache."""
    read = deps.read_planned_once_pool
    started = time.perf_counter()
    # The lookup also says which scopes of the snapshot the store had last time the key
    # may read: if it is still that store at that version, no other statement is needed.
    guess = deps.snapshots.guess(principal.workspace_id, req.store_ref)
    found = await search_sql.store_and_profile(
        read,
        principal.workspace_id,
        req.store_ref,
        req.query,
        reader=principal,
        scopes=guess.scopes if guess is not None else (),
    )
    deps.phase("store", time.perf_counter() - started)
    if found is None:
        raise NotFound(f"Store {req.store_ref!r} not found")
    store, profile = found
    # A small store unchanged since its snapshot was read is ranked from the snapshot; a
    # changed one by the SQL arms, while a new snapshot is read in the background.
    snapshot = None
    if search_sql.planned_once(profile) and profile.docs > 0:
        snapshot = deps.snapshots.fresh(
            principal.workspace_id, req.store_ref, store.id, store.version
        )
    scopes = profile.readable_scopes if snapshot is not None and snapshot is guess else None
    if req.speaker is not None and not await memories_sql.speaker_exists(
        read, principal.workspace_id, store.id, req.speaker
    ):
        raise NotFound(f"Speaker {req.speaker!r} is not registered in store {store.name!r}")
    return store, profile, snapshot, snapshots.Reader(principal, scopes)


def _model(deps: SearchDeps) -> tuple[Embedder, QueryEncoder]:
    """The embedding model and its query encoder; a 503 while it is still loading."""
    if deps.queries is None or deps.embedder is None:
        raise Unavailable(
            "The embedding model is still loading; retry in a few seconds", retry_after=5
        )
    return deps.embedder, deps.queries


def _billed(deps: SearchDeps, principal: Principal, store_id: str, answer: Answer) -> Answer:
    """Bill the search and stamp what it returned, both written off the response path
    (the toucher's wake also flushes the meter), and at once in this instance's snapshot
    of the store."""
    workspace_id = principal.workspace_id
    deps.meter.add(workspace_id, "search", answer.units)
    deps.toucher.add(workspace_id, answer.memory_ids)
    deps.snapshots.touch(workspace_id, store_id, answer.memory_ids, datetime.now(UTC))
    return answer
