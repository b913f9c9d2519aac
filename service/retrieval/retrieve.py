"""A search answered by retrieval, for the search engine (``service.retrieval.engine``):
the main retrieval (and verify's passes over it), the agent's own words and the images,
each ranked (``service.retrieval.ranking``), then rendered. Each retrieval is answered
from the store's snapshot where it can be (``service.retrieval.snapshots``), else by the
SQL arms (``service.queries.search``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from embeddings.batcher import QueryEncoder, Vector
from service.ops import db
from service.queries import search as search_sql
from service.queries.memories import Store
from service.queries.search import Candidate, Profile, RetrievalRequest, SearchFilters
from service.retrieval import ranking, snapshots
from service.retrieval.deps import SearchDeps
from service.retrieval.memory_models import MemoryModel
from service.retrieval.render import render
from service.retrieval.search_request import SearchRequest
from service.retrieval.verify import pass_order, verify_depth, verify_passes


@dataclass(frozen=True)
class Target:
    """The store a search reads: its profile, who reads it, and its snapshot if one is
    exact for its version."""

    store: Store
    profile: Profile
    reader: snapshots.Reader
    snapshot: snapshots.Snapshot | None


@dataclass(frozen=True)
class Rendered:
    """The answer's body, and the memories it delivers (billed and stamped as used)."""

    body: dict[str, Any]
    delivered: list[Candidate]


@dataclass(frozen=True)
class SearchContext:
    """What every retrieval of one search shares: where it runs and how it is ranked."""

    deps: SearchDeps
    model: MemoryModel
    connection: db.LazyConnection
    reader: snapshots.Reader
    snapshot: snapshots.Snapshot | None  # the store's, exact for its version
    now: datetime
    named_speaker: str | None  # the speaker the query names, for ranking
    named_period: ranking.Period | None  # the month or year it names, for ranking
    asked: ranking.Asks  # whether it asks when, or about the present, for ranking


@dataclass(frozen=True)
class Found:
    """What a search delivers, by part."""

    memories: list[Candidate]
    verify_used: int
    self_memories: list[Candidate]
    images: list[Candidate]


async def retrieve_and_render(
    deps: SearchDeps,
    queries: QueryEncoder,
    model: MemoryModel,
    req: SearchRequest,
    target: Target,
    early: asyncio.Future[Vector] | None = None,
) -> Rendered:
    """Retrieve and render. ``early``: the query's vector, already being computed."""
    # Exact scans run on connections that plan once (service.ops.db.PLANNED_ONCE_SETTINGS).
    planned_once = search_sql.planned_once(target.profile)
    pool = deps.read_planned_once_pool if planned_once else deps.read_pool
    now = datetime.now(UTC)
    named = await _named_speaker(deps, req, target) if model.features else None
    period = ranking.named_period(req.query) if model.features else None
    asked = ranking.asks(req.query) if model.features else ranking.NOTHING_ASKED
    main = main_retrieval(model, req, target.store.id, target.profile, target.reader)
    async with db.LazyConnection(pool) as lazy:
        context = SearchContext(
            deps, model, lazy, target.reader, target.snapshot, now, named, period, asked
        )
        ranks = await _early_text_ranks(context, req, main)
        started = time.perf_counter()  # "embed": the wait for the vector
        vector = await (early if early is not None else queries.encode(req.query))
        deps.phase("embed", time.perf_counter() - started)
        started = time.perf_counter()
        found = await _retrieve(context, req, replace(main, vector=vector), ranks)
    deps.phase("retrieve", time.perf_counter() - started)
    return _render(deps, model, req, target.store, found)


async def _named_speaker(deps: SearchDeps, req: SearchRequest, target: Target) -> str | None:
    """The registered speaker the query names, by the store's matcher for its speakers."""
    matcher = await deps.speaker_names.matcher(
        deps.read_planned_once_pool,
        target.reader.principal.workspace_id,
        target.store.id,
        target.profile.speakers_version,
    )
    return matcher.named(req.query)


def per_arm_of(max_results: int) -> int:
    """Candidates each arm of a retrieval brings, for ``max_results`` results."""
    return max(60, 4 * max_results)


def main_retrieval(
    model: MemoryModel,
    req: SearchRequest,
    store_id: str,
    profile: Profile,
    reader: snapshots.Reader,
) -> RetrievalRequest:
    """The main retrieval, before its vector: everything but the agent's own words and
    images, when those are answered apart; verify's passes draw on it, a little deeper."""
    return RetrievalRequest(
        principal=reader.principal,
        store_id=store_id,
        profile=profile,
        query_text=req.query,
        vector=None,
        filters=req.filters,
        per_arm=verify_depth(per_arm_of(req.max_results), req.verify),
        subset="all",
        speaker=req.speaker,
        self_only=False if model.self_apart else None,
        images=False if model.images else None,
        use_fts=model.fuse_text,
    )


async def _early_text_ranks(
    context: SearchContext, req: SearchRequest, main: RetrievalRequest
) -> dict[str, float] | None:
    """The main retrieval's full-text arm, which needs no vector: it runs while the model
    encodes the query (a snapshot's needs no SQL). ``None``: not run here."""
    wants_self = req.speaker == "me" and context.model.self_apart
    if context.snapshot is not None or wants_self or not main.use_fts:
        return None
    if main.profile.size("all") == 0:
        return None
    started = time.perf_counter()
    statements, values = search_sql.plan(main)
    ranks = await search_sql.text_ranks(await context.connection.get(), statements, values)
    context.deps.phase("text", time.perf_counter() - started)
    return ranks


async def _retrieve(
    context: SearchContext,
    req: SearchRequest,
    main: RetrievalRequest,
    ranks: dict[str, float] | None,
) -> Found:
    """The search's retrievals, in order: the main one (unless only the agent's own words
    are asked for), the agent's own words, the images."""
    model, per_arm = context.model, per_arm_of(req.max_results)
    memories: list[Candidate] = []
    verify_used = 0
    if not (req.speaker == "me" and model.self_apart):
        ranked = await _ranked(context, main, ranks)
        memories = [c for c, _ in ranked[: req.max_results]]
        if req.verify:
            order = pass_order(
                ranked,
                now=context.now,
                speaker=context.named_speaker,
                period=context.named_period,
                asked=context.asked,
            )
            memories, verify_used = verify_passes(memories, order, req.max_results, req.verify)
    self_memories: list[Candidate] = []
    if model.self_apart:
        own = replace(
            main,
            per_arm=per_arm,
            subset="self",
            speaker=None,
            self_only=True,
            images=None,
            filters=SearchFilters(),
        )
        self_memories = [c for c, _ in (await _ranked(context, own))[: req.max_results]]
    images: list[Candidate] = []
    if model.images and req.max_images:
        pictures = replace(
            main, per_arm=per_arm, subset="images", speaker=None, self_only=None, images=True
        )
        images = [c for c, _ in (await _ranked(context, pictures))[: req.max_images]]
    return Found(memories, verify_used, self_memories, images)


async def _ranked(
    context: SearchContext, retrieval: RetrievalRequest, ranks: dict[str, float] | None = None
) -> list[tuple[Candidate, float]]:
    """The retrieval's candidates, ranked best first with their scores (``ranks``: its
    full-text arm's, when already asked for)."""
    if retrieval.profile.size(retrieval.subset) == 0:
        return []  # nothing of that kind in the store: no need to ask
    found, path = None, "sql"
    if context.snapshot is not None:
        path = "snapshot" if snapshots.in_memory(context.reader, retrieval.filters) else "checked"
        found = await snapshots.candidates(
            context.connection.get, context.snapshot, context.reader, retrieval
        )
    if found is None:
        path = "sql"
        found = await search_sql.candidates(await context.connection.get(), retrieval, ranks)
    context.deps.metrics.retrievals.labels(path).inc()
    model = context.model
    return ranking.scored(
        found,
        fuse_text=model.fuse_text,
        use_features=model.features,
        now=context.now,
        speaker=context.named_speaker,
        period=context.named_period,
        asked=context.asked,
    )


def _render(
    deps: SearchDeps, model: MemoryModel, req: SearchRequest, store: Store, found: Found
) -> Rendered:
    """The body, and the memories it delivers."""
    started = time.perf_counter()
    strip = store.strip_temporal
    body: dict[str, Any] = {"memories": [render(c, req, strip) for c in found.memories]}
    if model.images:
        body["images"] = [
            {**render(c, req, strip), "media_url": f"/api/v1/memories/{c.id}/media"}
            for c in found.images
        ]
    if model.self_apart:
        body["self_memories"] = [render(c, req, strip) for c in found.self_memories]
    if req.verify > 0:
        body["verify_used"] = found.verify_used
    deps.phase("render", time.perf_counter() - started)
    return Rendered(body, found.memories + found.self_memories + found.images)
