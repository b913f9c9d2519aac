"""Operational endpoints (no key needed): liveness, readiness, metrics, API description."""

from __future__ import annotations

import logging
from importlib import resources
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.app_keys import EMBEDDER, METRICS, OUTAGE, POOL, QUEUE, SNAPSHOTS
from service.http.json import json_response
from service.ops import migrations
from service.queries import webhooks

log = logging.getLogger("mneme.ops")


async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    body: dict[str, Any] = {
        "status": "ok",
        "database": "ok",
        "migrations": "ok",
        "model": request.app[EMBEDDER].state,
        "embeddingQueue": 0,
    }
    try:
        async with request.app[POOL].acquire() as conn:
            body["embeddingQueue"], _ = await request.app[QUEUE].state(conn)
            try:
                await migrations.check_current(conn)
            except migrations.MigrationError as exc:
                body["migrations"] = str(exc)
    except Exception as exc:
        request.app[OUTAGE].note(exc, log, "readiness check failed")
        body["database"] = "unreachable"
    if body["database"] != "ok" or body["migrations"] != "ok" or body["model"] != "ready":
        body["status"] = "unavailable"
        return json_response(body, status=503)
    return json_response(body)


async def metrics(request: web.Request) -> web.Response:
    m = request.app[METRICS]
    m.snapshot_bytes.set(request.app[SNAPSHOTS].held_bytes)
    try:
        depth, lag = await request.app[QUEUE].state(request.app[POOL])
        m.embedding_queue.set(depth)
        m.embedding_lag.set(lag)
        pending, failed = await webhooks.backlog(request.app[POOL], None)
        m.webhook_backlog.set(pending)
        m.webhook_failed.set(failed)
    except Exception as exc:
        request.app[OUTAGE].note(exc, log, "metrics: could not read the queues")
    body = generate_latest(m.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def _static(name: str) -> bytes:
    return resources.files("service").joinpath("static", name).read_bytes()


async def openapi(request: web.Request) -> web.Response:
    return web.Response(body=_static("openapi.json"), content_type="application/json")


# The page talks only to this server; nothing inline, nothing from elsewhere.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
STATIC_FILES = {
    "app.js": "text/javascript",
    "app.css": "text/css",
    # uPlot 1.6.32 (MIT, uPlot.LICENSE.txt): the Overview's charts, served from here.
    "uPlot.iife.min.js": "text/javascript",
    "uPlot.min.css": "text/css",
    "uPlot.LICENSE.txt": "text/plain",
}


async def page(request: web.Request) -> web.Response:
    """The memory browser (SPEC §7)."""
    return web.Response(
        body=_static("index.html"), content_type="text/html", charset="utf-8", headers=PAGE_HEADERS
    )


async def static_file(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    content_type = STATIC_FILES.get(name)
    if content_type is None:
        raise web.HTTPNotFound()
    return web.Response(
        body=_static(name), content_type=content_type, charset="utf-8", headers=PAGE_HEADERS
    )


async def llms_txt(request: web.Request) -> web.Response:
    return web.Response(body=_static("llms.txt"), content_type="text/plain", charset="utf-8")
