"""``/mcp``: Mneme's MCP tools over the Streamable HTTP transport, with the caller's key.

The tools are ``mneme_client.mcp_server``'s, the same table ``mneme-mcp`` serves over
stdio, served here by the official MCP SDK's Streamable HTTP machinery (``asgi.py``
bridges it to aiohttp). Stateless: each POST is answered on its own, so any replica can
answer any request, with no session to keep or route to (GET has no stream to offer and
DELETE no session to end: both are 405).

Who a call acts for: the access middleware has checked the key (401 with
``WWW-Authenticate: Bearer`` before any MCP message is read; ``memory:read`` needed);
each tool then calls the service's own REST API over loopback with that same key, so
the readability rule, scopes, rate limits and usage are exactly the REST API's (a tool
call counts as this request plus the REST requests it makes). The store a tool uses when
none is named is the URL's ``store`` query parameter, else ``default``.

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

import httpx
from aiohttp import web
from mcp.server.transport_security import TransportSecuritySettings
from mneme_client._async import AsyncMneme
from mneme_client.mcp_server import CALLER, Caller, build_server
from starlette.applications import Starlette

from service.app_keys import SETTINGS
from service.http.asgi import serve_asgi
from service.http.errors import ApiError
from service.http.middleware import presented_key
from service.settings import normal_origin

PATH = "/mcp"
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


class McpDoor:
    """What the endpoint holds for the app's lifetime: the SDK's ASGI application (its
    session manager running) and the HTTP client the tools call the REST API with."""

    def __init__(self, asgi: Starlette, http: httpx.AsyncClient) -> None:
        self.asgi = asgi
        self.http = http


MCP = web.AppKey("mcp", McpDoor)


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
    async with (
        # trust_env=False: the loopback calls carry the caller's key, and must never go
        # through a proxy that HTTP_PROXY or the like names for the process.
        httpx.AsyncClient(timeout=httpx.Timeout(60.0), trust_env=False) as http,
        held_open(asgi.router.lifespan_context(asgi)),
    ):
        app[MCP] = McpDoor(asgi, http)
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


def check_origin(request: web.Request) -> dict[str, str]:
    """The CORS headers for the request's origin: none without an ``Origin`` header
    (agents, servers), 403 for an origin that is not allowed."""
    origin = request.headers.get("Origin")
    if origin is None:
        return {}
    if normal_origin(origin) not in request.app[SETTINGS].mcp_allowed_origins:
        raise ApiError(
            403,
            "This Origin may not use /mcp: add it to MNEME_MCP_ALLOWED_ORIGINS to allow a "
            "browser page there",  # never the header's value in a body (SPEC §9)
        )
    return {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}


def loopback(request: web.Request) -> str:
    """The base URL of the socket this request came in on: where the tools reach the
    REST API (this very server, whatever its host name is outside)."""
    host, port = request.transport.get_extra_info("sockname")[:2]  # type: ignore[union-attr]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def handle(request: web.Request) -> web.StreamResponse:
    """POST /mcp: one MCP exchange, acting for the caller's key."""
    cors = check_origin(request)
    door = request.app[MCP]
    client = AsyncMneme(
        presented_key(request), loopback(request), max_retries=0, http_client=door.http
    )
    token = CALLER.set(Caller(client, request.query.get("store") or "default"))
    try:
        response = await serve_asgi(door.asgi, request, headers=cors)
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
