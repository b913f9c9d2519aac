"""The application factory and everything with a lifetime.

``create_app`` does no I/O. The database (embedded server, migrations, pool, first-run
bootstrap) and the janitor are async generators in ``app.cleanup_ctx``, in dependency
order, so they start when the app starts and stop in reverse order on shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from service import db
from service.bootstrap import bootstrap, print_first_key
from service.metrics import Metrics
from service.middleware import access_middleware, context_middleware
from service.queries import idempotency, ratelimit
from service.routes import ROUTES, Route
from service.settings import Settings
from service.state import HEALTH, METRICS, POOL, ROUTE_SPECS, SETTINGS, Health

log = logging.getLogger("mneme.app")

JANITOR_INTERVAL_S = 60.0


def create_app(
    settings: Settings, *, announce_key: Callable[[str], None] = print_first_key
) -> web.Application:
    app = web.Application(
        middlewares=[context_middleware, access_middleware],
        client_max_size=settings.max_body_bytes,
    )
    app[SETTINGS] = settings
    app[METRICS] = Metrics()
    app[HEALTH] = Health()
    specs: dict[web.AbstractRoute, Route] = {}
    for spec in ROUTES:
        specs[app.router.add_route(spec.method, spec.path, spec.handler)] = spec
    app[ROUTE_SPECS] = specs

    async def database(app: web.Application) -> AsyncIterator[None]:
        url = await db.resolve_url(settings)
        await db.prepare_schema(url, auto_migrate=settings.embedded)
        pool = await db.create_pool(url, settings)
        app[POOL] = pool
        app[METRICS].pool.pool = pool
        async with pool.acquire() as conn:
            await bootstrap(conn, settings.bootstrap_key, announce_key)
        yield
        await pool.close()

    app.cleanup_ctx.append(database)
    app.cleanup_ctx.append(janitor)
    return app


async def janitor(app: web.Application) -> AsyncIterator[None]:
    """Periodic housekeeping: drop spent rate-limit windows and expired idempotency keys."""

    async def loop() -> None:
        while True:
            await asyncio.sleep(JANITOR_INTERVAL_S)
            try:
                async with app[POOL].acquire() as conn:
                    await ratelimit.prune(conn)
                    await idempotency.prune(conn)
            except Exception:
                log.exception("janitor pass failed; will retry")

    task = asyncio.create_task(loop(), name="mneme-janitor")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
