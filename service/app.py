"""The application factory.

``create_app`` does no I/O. What lives as long as the app is an async generator in
``app.cleanup_ctx``, in dependency order — database (here) → model → write-behind flush →
MCP → worker (``service.ops.embedding``) → janitor (``service.ops.jobs``) → webhook
dispatcher (``service.webhooks.dispatcher``) — so it starts
when the app starts and stops in reverse order on shutdown (the worker finishes its
current batch first).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
from aiohttp import web

from embeddings import Embedder
from embeddings.worker import QueueProbe
from service.app_keys import (
    DATABASE_URL,
    EMBEDDER,
    METER,
    METRICS,
    OUTAGE,
    PLANNED_ONCE_POOL,
    POOL,
    QUEUE,
    READ_PLANNED_ONCE_POOL,
    READ_POOL,
    RECENT_KEYS,
    ROUTE_SPECS,
    SETTINGS,
    SNAPSHOTS,
    SPEAKER_NAMES,
    TOUCHER,
    EmbedderSlot,
    RecentKeys,
)
from service.faces import mcp
from service.http.inputs import input_middleware
from service.http.middleware import access_middleware, context_middleware
from service.http.outage import Outage
from service.http.route import Route
from service.http.server import standard_headers
from service.ops import db, jobs
from service.ops.bootstrap import bootstrap, print_first_key
from service.ops.embedding import embedding_worker, model_lifetime
from service.ops.meter import Meter
from service.ops.metrics import Metrics
from service.ops.toucher import Toucher
from service.retrieval.snapshots import Snapshots
from service.retrieval.speaker_names import SpeakerNames
from service.routes import ROUTES
from service.settings import Settings
from service.webhooks import dispatcher

log = logging.getLogger("mneme.app")


async def model_loaded(app: web.Application) -> None:
    """Until the embedding model is loaded (``/readyz`` answers 200 from then on)."""
    await app[EMBEDDER].ready.wait()


def create_app(
    settings: Settings,
    *,
    embedder: Embedder | None = None,
    announce_key: Callable[[str], None] = print_first_key,
) -> web.Application:
    """The service. ``embedder`` skips loading the model (tests share one)."""
    app = web.Application(
        middlewares=[context_middleware, input_middleware, access_middleware],
        client_max_size=settings.max_body_bytes,
    )
    app[SETTINGS] = settings
    app[METRICS] = Metrics()
    app[EMBEDDER] = EmbedderSlot()
    app[OUTAGE] = Outage()
    app[RECENT_KEYS] = RecentKeys()
    app[QUEUE] = QueueProbe()
    app[TOUCHER] = Toucher()
    app[METER] = Meter()
    app[SPEAKER_NAMES] = SpeakerNames()
    specs: dict[web.AbstractRoute, Route] = {}
    for spec in ROUTES:
        specs[app.router.add_route(spec.method, spec.path, spec.handler)] = spec
        if spec.method == "GET":  # HEAD as well, as aiohttp's add_get gives (curl -I, probes)
            specs[app.router.add_route("HEAD", spec.path, spec.handler)] = spec
    app[ROUTE_SPECS] = specs
    app.on_response_prepare.append(standard_headers)
    lifetimes = [database_lifetime(announce_key), model_lifetime(embedder)]
    app.cleanup_ctx.extend([*lifetimes, jobs.write_behind, mcp.mcp_door])
    if settings.worker:
        app.cleanup_ctx.append(embedding_worker)
    app.cleanup_ctx.append(jobs.janitor)
    app.cleanup_ctx.append(dispatcher.lifetime)
    return app


def database_lifetime(
    announce_key: Callable[[str], None],
) -> Callable[[web.Application], AsyncIterator[None]]:
    """The database's part of the app's lifetime: the schema made current (embedded) or
    checked, the pools and the snapshots opened, the bootstrap key announced."""

    async def database(app: web.Application) -> AsyncIterator[None]:
        settings = app[SETTINGS]
        url = await db.resolve_url(settings)
        # Behind a transaction pooler, the settings are stored for the role before any
        # pooled connection opens: on the direct connection, if there is one.
        await db.prepare_schema(
            settings.session_url(url) or url,
            auto_migrate=settings.embedded,
            pooled=settings.transaction_pooled,
            wait_s=settings.database_wait_s,
        )
        app[DATABASE_URL] = url
        async with contextlib.AsyncExitStack() as stack:
            await _open_pools(app, url, stack)
            # Snapshots are read where searches read: a snapshot is exact for the store
            # version that side has (service.retrieval.engine).
            snapshots = Snapshots(app[READ_POOL], max_bytes=settings.snapshot_bytes)
            stack.push_async_callback(snapshots.close)
            app[SNAPSHOTS] = snapshots
            async with app[POOL].acquire() as conn:
                await bootstrap(conn, settings.bootstrap_key, announce_key)
            yield

    return database


async def _open_pools(app: web.Application, url: str, stack: contextlib.AsyncExitStack) -> None:
    """The primary's pools, and the read replica's where one is configured (reads go to
    the primary otherwise); each closed by ``stack``."""
    settings = app[SETTINGS]

    async def pool_of(url: str, **options: Any) -> asyncpg.Pool:
        pool = await db.create_pool(url, settings, **options)
        stack.push_async_callback(pool.close)
        return pool

    app[POOL] = await pool_of(url)
    app[METRICS].pool.pool = app[POOL]
    app[PLANNED_ONCE_POOL] = await pool_of(url, planned_once=True, min_size=1)
    app[OUTAGE].follow(app[POOL])
    app[OUTAGE].follow(app[PLANNED_ONCE_POOL])
    app[READ_POOL], app[READ_PLANNED_ONCE_POOL] = app[POOL], app[PLANNED_ONCE_POOL]
    if (read_url := settings.read_database_url) is not None:
        app[READ_POOL] = await pool_of(read_url)
        app[READ_PLANNED_ONCE_POOL] = await pool_of(read_url, planned_once=True, min_size=1)
