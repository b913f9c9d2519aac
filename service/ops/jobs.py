"""Background jobs of a serving process: the write-behind flush (last-used stamps and
billed units, off the response path) and the janitor (housekeeping on one replica at a
time, and large stores' own vector indexes)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import AsyncIterator

from aiohttp import web

from service.app_keys import DATABASE_URL, METER, OUTAGE, POOL, SETTINGS, TOUCHER
from service.queries import (
    cache,
    idempotency,
    leases,
    memories,
    oauth,
    ratelimit,
    search_stats,
    stores,
    webhooks,
)
from service.retrieval import store_indexes

log = logging.getLogger("mneme.app")

JANITOR_INTERVAL_S = 60.0
FLUSH_S = 0.5


async def cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def write_behind(app: web.Application) -> AsyncIterator[None]:
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
    await cancel(task)
    await flush_before_stopping(app)


async def flush_before_stopping(app: web.Application) -> None:
    """What is pending when stopping: billed units and ``last_used_at`` stamps must not
    vanish without a word. Each is tried on its own; one that fails is logged with what
    is lost (the requests and units, the stamps)."""
    meter, toucher = app[METER], app[TOUCHER]
    try:
        await meter.flush(app[POOL])
    except Exception as exc:
        log.error(
            "usage lost: could not record it before stopping",
            extra={
                "requests": sum(r for r, _ in meter.pending.values()),
                "units": round(sum(n for _, n in meter.pending.values()), 6),
                "error": f"{type(exc).__name__}: {exc}"[:300],
            },
        )
    try:
        await toucher.flush(app[POOL])
    except Exception as exc:
        log.error(
            "last_used_at stamps lost: could not record them before stopping",
            extra={
                "memories": sum(len(ids) for ids in toucher.pending.values()),
                "error": f"{type(exc).__name__}: {exc}"[:300],
            },
        )


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
        await cache.prune(conn)
        await search_stats.compact_stats(conn)
        await stores.prune_versions(conn)
        await webhooks.prune(conn)
        await oauth.prune(conn)
    while retention:
        async with pool.acquire() as conn, conn.transaction():
            archived = await memories.archive_due(conn, settings.transitory_idle_s)
            for workspace_id, memory in archived:
                await memories.add_version(conn, workspace_id, memory, "modified", "retention")
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
            log.warning(
                "no large-store indexes behind a transaction pooler without "
                "MNEME_DIRECT_DATABASE_URL; large stores use the shared index"
            )
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
        await cancel(task)
    try:  # another replica need not wait for the lease to run out
        await leases.release(app[POOL], JANITOR_LEASE, holder)
    except Exception as exc:
        app[OUTAGE].note(exc, log, "could not release the janitor's lease")
