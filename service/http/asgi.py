"""One aiohttp request served by an ASGI application (the MCP SDK's Streamable HTTP
transport is one), its answer streamed back through aiohttp.

Only what one HTTP exchange needs: the scope from the request, its body (read by the
service's own reader, under its size limit and deadline) as a single ``http.request``
message, and the application's ``http.response.*`` messages written to a
``StreamResponse`` as they come (server-sent events included). ``receive`` after the body
waits until the response is complete (or the client has gone), then says
``http.disconnect``, as an ASGI server does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from aiohttp import web

from service.http.inputs import body_of

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]


def scope_of(request: web.Request, body_size: int) -> dict[str, Any]:
    """The ASGI HTTP scope of ``request``."""
    # The bytes as they came (a value need not be Latin-1: UTF-8 or any byte must reach
    # the MCP library as it was sent, never fail here as a 500).
    headers = [(k.lower(), v) for k, v in request.raw_headers]
    if "Content-Length" not in request.headers and body_size:
        headers.append((b"content-length", str(body_size).encode()))
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    peername = request.transport.get_extra_info("peername") if request.transport else None
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode("utf-8", "surrogateescape"),
        "query_string": request.rel_url.raw_query_string.encode("utf-8", "surrogateescape"),
        "root_path": "",
        "headers": headers,
        "client": tuple(peername[:2]) if peername else None,
        "server": tuple(sockname[:2]) if sockname else None,
    }


class _Exchange:
    """The ASGI side of one request: ``receive`` and ``send`` over aiohttp.

    An answer that comes in one body message becomes a plain ``web.Response``, which the
    middlewares still dress (request id, timing); one in several is streamed."""

    def __init__(self, request: web.Request, body: bytes, headers: Mapping[str, str]) -> None:
        self.request = request
        self.body: bytes | None = body
        self.headers = headers
        self.response: web.StreamResponse | None = None
        self.done = asyncio.Event()

    async def receive(self) -> Message:
        if self.body is not None:
            body, self.body = self.body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self.done.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            response = web.StreamResponse(status=message["status"], headers=self.headers)
            for name, value in message.get("headers", []):
                response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
            self.response = response
        elif message["type"] == "http.response.body" and self.response is not None:
            await self._body(message.get("body", b""), message.get("more_body", False))

    async def _body(self, body: bytes, more: bool) -> None:
        assert self.response is not None
        if not more and not self.response.prepared:  # the whole answer at once
            whole = web.Response(status=self.response.status, body=body)
            whole.headers.extend(
                (k, v) for k, v in self.response.headers.items() if k.lower() != "content-length"
            )
            self.response = whole
            self.done.set()
            return
        if not self.response.prepared:
            await self.response.prepare(self.request)
        if body:
            await self.response.write(body)
        if not more:
            await self.response.write_eof()
            self.done.set()


async def serve_asgi(
    app: ASGIApp, request: web.Request, headers: Mapping[str, str] | None = None
) -> web.StreamResponse:
    """``request`` answered by ``app``; ``headers`` added to its answer."""
    body = await body_of(request)
    exchange = _Exchange(request, body, headers or {})
    try:
        await app(scope_of(request, len(body)), exchange.receive, exchange.send)
    finally:
        exchange.done.set()
    if exchange.response is None:
        raise RuntimeError("the ASGI application sent no response")
    return exchange.response
