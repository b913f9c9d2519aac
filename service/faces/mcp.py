"""``/mcp``: Mneme's MCP tools over the Streamable HTTP transport, with the caller's key.

The tools are ``mneme_mcp_tools``' table, the one ``mneme-mcp`` serves over stdio,
served here by the official MCP SDK's Streamable HTTP machinery (``asgi.py`` bridges it
to aiohttp). Stateless: each POST is answered on its own, so any replica can
answer any request, with no session to keep or route to (GET has no stream to offer and
DELETE no session to end: both are 405).

Who a call acts for: the access middleware has checked the key (401 with
``WWW-Authenticate: Bearer`` before any MCP message is read; ``memory:read`` needed);
each tool then runs in-process, through the engine, for that key's principal
(``mcp_engine.EngineExecutor``), so the readability rule, scopes and usage are exactly
the REST API's, and a tool call counts once against the rate limit: as this request. An
OAuth access token (``service.faces.oauth``) acts as the key that approved it, narrowed to
its grant's scopes. The store a tool uses when none is named: ``default_store``.

Browsers: a request with an ``Origin`` header is refused (403) unless that origin is in
``MNEME_MCP_ALLOWED_ORIGINS`` (the MCP specification asks HTTP servers to check it, as a
defence against DNS rebinding); allowed origins get CORS headers and preflights.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any

from aiohttp import web
from mcp.server.transport_security import TransportSecuritySettings
from mneme_mcp_tools import CALLER, Caller, build_server
from starlette.applications import Starlette

from service.app_keys import SETTINGS
from service.faces.mcp_engine import EngineExecutor
from service.http.asgi import serve_asgi
from service.http.errors import ApiError
from service.http.middleware import principal_of
from service.http.public import MCP_PATH, is_loopback, origin_of, public_base
from service.settings import normal_origin

PATH = MCP_PATH
# What a browser page of an allowed origin may send and read (the transport's headers).
CORS_HEADERS = {
    "Access-Control-Allow-Methods": "GET, POST, DELETE, OPTIONS",
    "Access-Control-Allow-Headers": (
        "Authorization, X-API-Key, Content-Type, Accept, Mcp-Session-Id, "
        "MCP-Protocol-Version, Last-Event-ID"
    ),
    "Access-Control-Expose-Headers": "Mcp-Session-Id, request-id",
    "Access-Control-Max-Age": "600",
}


# What the endpoint holds for the app's lifetime: the SDK's ASGI application, its
# session manager running.
MCP = web.AppKey("mcp", Starlette)


async def mcp_door(app: web.Application) -> AsyncIterator[None]:
    """Cleanup context: the MCP server and its session manager, up while the app is."""
    settings = app[SETTINGS]
    asgi = build_server().streamable_http_app(
        streamable_http_path=PATH,
        stateless_http=True,
        json_response=True,
        max_request_body_size=settings.max_body_bytes,
        # Origins are checked here (``check_origin``); the Host header is the
        # deployment's business (a proxy, a container name), not a fixed list.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    async with held_open(asgi.router.lifespan_context(asgi)):
        app[MCP] = asgi
        yield


@contextlib.asynccontextmanager
async def held_open(context: AbstractAsyncContextManager[Any]) -> AsyncIterator[None]:
    """``context`` entered and left by a task of its own: anyio's task groups (the SDK's
    session manager holds one) must be left by the task that entered them, and aiohttp
    may run a cleanup context's start and end in different tasks."""
    entered, leave = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with context:
            entered.set()
            await leave.wait()

    task = asyncio.create_task(hold(), name="mneme-mcp-lifespan")
    waiting = asyncio.create_task(entered.wait())
    await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if task.done():
        task.result()  # the context failed to enter: raise why
    try:
        yield
    finally:
        leave.set()
        await task


def default_store(request: web.Request) -> str:
    """The store a tool uses when none is named: an OAuth token's grant's (the person
    chose it on the consent page), else the URL's ``store`` parameter, else ``default``."""
    return principal_of(request).grant_store or request.query.get("store") or "default"


def own(request: web.Request) -> tuple[str, ...]:
    """The service's own origin, which a page it serves may always use: MNEME_PUBLIC_URL's,
    or, on a loopback host, the request's. Never the request's on any other host: a DNS
    rebinding attack sends its own name as both Host and Origin."""
    if request.app[SETTINGS].public_url is not None:
        return (normal_origin(origin_of(public_base(request))),)
    host = request.host.rsplit(":", 1)[0] if not request.host.endswith("]") else request.host
    return (normal_origin(f"{request.scheme}://{request.host}"),) if is_loopback(host) else ()


def check_origin(request: web.Request) -> dict[str, str]:
    """The CORS headers for the request's origin: none without an ``Origin`` header
    (agents, servers), 403 for an origin that is not allowed."""
    origin = request.headers.get("Origin")
    if origin is None:
        return {}
    if normal_origin(origin) not in (*request.app[SETTINGS].mcp_allowed_origins, *own(request)):
        raise ApiError(
            403,
            "This Origin may not use /mcp: add it to MNEME_MCP_ALLOWED_ORIGINS to allow a "
            "browser page there",  # never the header's value in a body (SPEC §9)
        )
    return {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}


async def handle(request: web.Request) -> web.StreamResponse:
    """POST /mcp: one MCP exchange, acting for the caller's key."""
    cors = check_origin(request)
    token = CALLER.set(Caller(EngineExecutor(request), default_store(request)))
    try:
        response = await serve_asgi(request.app[MCP], request, headers=cors)
    finally:
        CALLER.reset(token)
    if response.status >= 400:
        # The transport's refusals (a Content-Type or Accept it cannot serve, a body that
        # is not JSON-RPC), as bare text or a JSON-RPC error without an id: in the
        # service's error shape, same status, keeping a JSON-RPC error's code beside its
        # message, so the error object is JSON-RPC's too. A 5xx says no more than that.
        if response.status >= 500:
            raise ApiError(response.status, "MCP: the request could not be served")
        message, code = refusal(response)
        error = ApiError(response.status, f"MCP: {message}")
        if code is not None:
            error.extra["code"] = code
        raise error
    return response


REFUSAL_CHARS = 300  # a refusal quotes what it could not read: the start of it is enough


def refusal(response: web.StreamResponse) -> tuple[str, int | None]:
    """What the transport said when it refused a request: its text, or the message of
    its JSON-RPC error with that error's code."""
    text = (response.text if isinstance(response, web.Response) else None) or ""
    try:
        error = json.loads(text)["error"]
        message, code = error["message"], error.get("code")
    except (ValueError, KeyError, TypeError, AttributeError):
        message, code = text, None
    message = str(message).strip()[:REFUSAL_CHARS] or "request refused"
    return message, code if isinstance(code, int) else None


async def no_session(request: web.Request) -> web.Response:
    """GET and DELETE /mcp: a stateless server has no stream to open and no session to
    end (the transport lets a server answer both 405; clients then carry on with POST)."""
    check_origin(request)
    raise ApiError(
        405,
        f"{request.method} /mcp: this MCP server is stateless (no session, no stream); "
        "send each JSON-RPC message as a POST",
        headers={"Allow": "POST, OPTIONS"},
    )


async def preflight(request: web.Request) -> web.Response:
    """OPTIONS /mcp: a browser asking whether its page may call; only allowed origins."""
    return web.Response(status=204, headers={**check_origin(request), **CORS_HEADERS})
