"""The application factory and everything with a lifetime.

``create_app`` does no I/O. What lives as long as the app is an async generator in
``app.cleanup_ctx``, in dependency order — database → model → worker → janitor — so it
starts when the app starts and stops in reverse order on shutdown (the worker finishes
its current batch first).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import secrets
import socket
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from embeddings import Embedder
from embeddings.worker import QueueProbe, Worker, WorkerConfig
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
    TOUCHER,
    EmbedderSlot,
    RecentKeys,
)
from service.faces import mcp
from service.http.inputs import input_middleware
from service.http.middleware import access_middleware, context_middleware
from service.http.outage import Outage
from service.http.server import standard_headers
from service.ops import db
from service.ops.bootstrap import bootstrap, print_first_key
from service.ops.metrics import Metrics
from service.ops.toucher import Toucher
from service.queries import idempotency, leases, ratelimit, search, stores, usage
from service.queries import memories as q
from service.retrieval import store_indexes
from service.retrieval.snapshots import Snapshots
from service.routes import ROUTES, Route
from service.settings import Settings

log = logging.getLogger("mneme.app")

JANITOR_INTERVAL_S = 60.0
FLUSH_S = 0.5


def load_embedder(settings: Settings) -> Embedder:
    from embeddings.model import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder(
        settings.embedding_model,
        device=settings.embedding_device,
        batch_size=settings.embed_batch_size,
        backend=settings.embedding_backend,
        onnx_dir=settings.model_cache_dir,
        query_int8=settings.query_int8,
    )
    if embedder.dimension != db.VECTOR_DIMENSION:
        raise RuntimeError(
            f"{embedder.name} makes {embedder.dimension}-dimensional vectors; the schema "
            f"stores {db.VECTOR_DIMENSION}. Pick a {db.VECTOR_DIMENSION}-dimensional model"
        )
    return embedder


# Pauses before each further attempt to load the model. A load can fail for a passing
# reason (memory short for a moment, a file another process is making); one that still
# fails stops the process, non-zero, so that it is restarted or reported instead of
# staying up and unready.
MODEL_RETRY_S = (1.0, 2.0, 4.0)


async def load_model(slot: EmbedderSlot, settings: Settings) -> None:
    """Load the model into ``slot``, again after each of ``MODEL_RETRY_S`` if it fails;
    if it never loads, stop the process: exit status 1, after the graceful shutdown.

    The stop is a ``SystemExit`` raised from an event-loop callback, which is how
    aiohttp's own signal handler stops the server (with ``GracefulExit``, exit 0): the
    loop stops, ``serve`` (or ``web.run_app``) shuts the app down, and the interpreter
    exits with the message on stderr."""
    for attempt, pause in enumerate((*MODEL_RETRY_S, None), start=1):
        try:
            embedder = await asyncio.to_thread(load_embedder, settings)
        except Exception:
            if pause is None:
                slot.state = "failed"
                log.critical("could not load the embedding model; stopping the process",
                             exc_info=True, extra={"attempts": attempt})  # fmt: skip
                asyncio.get_running_loop().call_soon(_stop_unloaded)
                return
            log.warning("could not load the embedding model; trying again", exc_info=True,
                        extra={"attempt": attempt, "retry_in_s": pause})  # fmt: skip
            await asyncio.sleep(pause)
            continue
        slot.set(embedder)
        # What start-up made (torch, ONNX Runtime, the tokenizer: about a million
        # objects) lives as long as the process: out of the collector's sight, a full
        # collection no longer walks it in the middle of a request.
        gc.freeze()
        log.info(
            "embedding model ready",
            extra={
                "model": embedder.name,
                "backend": getattr(embedder, "backend", None),
                "queries": getattr(embedder, "query_backend", None),
                "attempts": attempt,
            },
        )
        return


def _stop_unloaded() -> None:
    raise SystemExit("mneme: error: the embedding model could not be loaded (see the log)")


def worker_config(settings: Settings) -> WorkerConfig:
    return WorkerConfig(
        claim_size=settings.embed_claim_size,
        lease_s=settings.embed_lease_s,
        poll_s=settings.embed_poll_s,
        max_attempts=settings.embed_max_attempts,
    )


def worker_listen(settings: Settings, url: str) -> bool | str:
    """Where a worker on ``url`` LISTENs (``Worker.listen``): on its pool, or behind a
    transaction pooler on MNEME_DIRECT_DATABASE_URL, or without it nowhere (it polls)."""
    if not settings.transaction_pooled:
        return True
    return settings.direct_database_url or False


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
    specs: dict[web.AbstractRoute, Route] = {}
    for spec in ROUTES:
        specs[app.router.add_route(spec.method, spec.path, spec.handler)] = spec
    app[ROUTE_SPECS] = specs
    app.on_response_prepare.append(standard_headers)

    async def database(app: web.Application) -> AsyncIterator[None]:
        url = await db.resolve_url(settings)
        # Behind a transaction pooler, the settings are stored for the role before any
        # pooled connection opens: on the direct connection, if there is one.
        await db.prepare_schema(
            settings.session_url(url) or url, auto_migrate=settings.embedded,
            pooled=settings.transaction_pooled, wait_s=settings.database_wait_s,
        )  # fmt: skip
        app[DATABASE_URL] = url
        async with contextlib.AsyncExitStack() as pools:
            pool = await db.create_pool(url, settings)
            pools.push_async_callback(pool.close)
            app[POOL] = pool
            app[METRICS].pool.pool = pool
            planned = await db.create_pool(url, settings, planned_once=True, min_size=1)
            pools.push_async_callback(planned.close)
            app[PLANNED_ONCE_POOL] = planned
            app[READ_POOL], app[READ_PLANNED_ONCE_POOL] = pool, planned
            if settings.read_database_url is not None:
                read = await db.create_pool(settings.read_database_url, settings)
                pools.push_async_callback(read.close)
                read_planned = await db.create_pool(
                    settings.read_database_url, settings, planned_once=True, min_size=1
                )
                pools.push_async_callback(read_planned.close)
                app[READ_POOL], app[READ_PLANNED_ONCE_POOL] = read, read_planned
            # Snapshots are read where searches read: a snapshot is exact for the store
            # version that side has (service.faces.search.handler).
            snapshots = Snapshots(app[READ_POOL], max_bytes=settings.snapshot_bytes)
            pools.push_async_callback(snapshots.close)
            app[SNAPSHOTS] = snapshots
            async with pool.acquire() as conn:
                await bootstrap(conn, settings.bootstrap_key, announce_key)
            yield

    async def model(app: web.Application) -> AsyncIterator[None]:
        slot = app[EMBEDDER]
        if embedder is not None:
            slot.set(embedder)
            yield
            return

        # In the background: the API answers (and /readyz says "loading") meanwhile.
        task = asyncio.create_task(load_model(slot, settings), name="mneme-model-load")
        yield
        await _cancel(task)

    app[TOUCHER] = Toucher()
    app[METER] = usage.Meter()
    app.cleanup_ctx.extend([database, model, touch_returned, mcp.mcp_door])
    if settings.worker:
        app.cleanup_ctx.append(embedding_worker)
    app.cleanup_ctx.append(janitor)
    return app


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def touch_returned(app: web.Application) -> AsyncIterator[None]:
    """Off the response path, in batches: ``last_used_at`` on what searches returned, and
    the units they billed."""
    toucher, meter = app[TOUCHER], app[METER]

    async def loop() -> None:
        while True:
            await toucher.wake.wait()
            toucher.wake.clear()
            await asyncio.sleep(FLUSH_S)  # gather a batch
            try:
                await meter.flush(app[POOL])
                await toucher.flush(app[POOL])
            except Exception as exc:
                app[OUTAGE].note(exc, log, "could not record usage or last_used_at; will retry")
                toucher.wake.set()

    task = asyncio.create_task(loop(), name="mneme-touch")
    yield
    await _cancel(task)
    with contextlib.suppress(Exception):  # what is pending when stopping
        await meter.flush(app[POOL])
        await toucher.flush(app[POOL])


async def embedding_worker(app: web.Application) -> AsyncIterator[None]:
    """The in-process worker (``MNEME_WORKER=on``); it waits for the model first."""
    stop = asyncio.Event()
    metrics = app[METRICS]

    async def run() -> None:
        slot = app[EMBEDDER]
        await slot.ready.wait()
        assert slot.embedder is not None
        worker = Worker(
            app[POOL], slot.embedder, worker_config(app[SETTINGS]),
            on_error=lambda exc: app[OUTAGE].note(exc, log, "worker batch failed"),
            listen=worker_listen(app[SETTINGS], app[DATABASE_URL]),
        )  # fmt: skip
        worker.stats.observers.append(metrics.observe_batch)
        try:
            await worker.run(stop)
        finally:
            worker.close()

    task = asyncio.create_task(run(), name="mneme-embedding-worker")
    yield
    stop.set()
    if not app[EMBEDDER].ready.is_set():  # no model (still loading, or it failed)
        await _cancel(task)
        return
    try:
        # Let the current batch finish and be stored; a lease covers anything cut short.
        await asyncio.wait_for(asyncio.shield(task), timeout=app[SETTINGS].shutdown_timeout)
    except TimeoutError:
        await _cancel(task)


JANITOR_LEASE = "janitor"
# The janitor's lease outlives this many of its passes: a replica that stops (or dies)
# hands the janitor to another within that many intervals.
LEASE_PASSES = 3


async def janitor_pass(app: web.Application, holder: str, *, retention: bool) -> bool:
    """One pass of housekeeping, if ``holder`` holds the janitor's lease (taken or
    renewed here; any number of replicas share a database, one of them does this at a
    time). Returns whether it ran."""
    settings = app[SETTINGS]
    pool = app[POOL]
    interval = min(JANITOR_INTERVAL_S, settings.retention_interval_s)
    if not await leases.take(pool, JANITOR_LEASE, holder, LEASE_PASSES * interval):
        return False
    async with pool.acquire() as conn:
        await ratelimit.prune(conn)
        await idempotency.prune(conn)
        await usage.prune(conn)
        await search.compact_stats(conn)
        await stores.prune_versions(conn)
    while retention:
        async with pool.acquire() as conn, conn.transaction():
            archived = await q.archive_due(conn, settings.transitory_idle_s)
            for workspace_id, memory in archived:
                await q.add_version(conn, workspace_id, memory, "modified", "retention")
        if archived:
            log.info("retention archived memories", extra={"count": len(archived)})
        retention = len(archived) >= 1000
    return True


async def janitor(app: web.Application) -> AsyncIterator[None]:
    """Housekeeping: spent rate-limit windows, expired idempotency keys, search-statistics
    deltas, retention (``janitor_pass``, on one replica at a time); and, in a task of its
    own (a build takes minutes), large stores' own vector indexes."""
    settings = app[SETTINGS]
    holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"

    async def loop() -> None:
        interval = min(JANITOR_INTERVAL_S, settings.retention_interval_s)
        since_retention = settings.retention_interval_s
        while True:
            try:
                due = since_retention >= settings.retention_interval_s
                if await janitor_pass(app, holder, retention=due) and due:
                    since_retention = 0.0
            except Exception as exc:
                app[OUTAGE].note(exc, log, "janitor pass failed; will retry")
            await asyncio.sleep(interval)
            since_retention += interval

    async def indexes() -> None:
        # A build holds a lock for its session: not through a transaction pooler.
        url = settings.session_url(app[DATABASE_URL])
        if url is None:
            log.warning("no large-store indexes behind a transaction pooler without "
                        "MNEME_DIRECT_DATABASE_URL; large stores use the shared index")  # fmt: skip
            return
        while True:
            try:
                if await store_indexes.due(app[POOL], settings.store_index_min):
                    await store_indexes.reconcile(url, settings.store_index_min)
            except Exception as exc:
                app[OUTAGE].note(exc, log, "store index pass failed; will retry")
            await asyncio.sleep(JANITOR_INTERVAL_S)

    tasks = [
        asyncio.create_task(loop(), name="mneme-janitor"),
        asyncio.create_task(indexes(), name="mneme-store-indexes"),
    ]
    yield
    for task in tasks:
        await _cancel(task)
    try:  # another replica need not wait for the lease to run out
        await leases.release(app[POOL], JANITOR_LEASE, holder)
    except Exception as exc:
        app[OUTAGE].note(exc, log, "could not release the janitor's lease")
