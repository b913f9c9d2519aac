"""The HTTP server around the app: what happens before the app sees a request.

aiohttp answers a request it cannot parse (a request line or header over its limits,
bytes that are not HTTP) itself, as plain text that echoes the offending bytes (a bearer
secret included) and with an error traceback in the log. Here such a request gets the
one JSON error shape (431 when something is too large, 400 otherwise) and one log line
at info level that names the problem, never the bytes.

Slow clients: a connection must deliver a complete request line and headers within
``header_timeout`` seconds of opening (or of its previous response, on keep-alive),
else it is closed; bodies are read under their own deadline (``service.http.inputs``).

Every response names the server without versions and carries ``nosniff``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import hdrs, web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong, PayloadEncodingError
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_runner import GracefulExit

from service.http.errors import ApiError, render_error
from service.http.public import issuer_warning
from service.ids import new_id
from service.settings import Settings

log = logging.getLogger("mneme.http")

SERVER = "mneme"


async def standard_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: on every response the app sends."""
    response.headers["Server"] = SERVER
    response.headers["X-Content-Type-Options"] = "nosniff"


def _refusal(exc: BaseException | None, status: int) -> ApiError:
    if isinstance(exc, LineTooLong) or (
        isinstance(exc, BadHttpMessage) and "Too many headers" in exc.message
    ):
        return ApiError(
            431,
            "The request line or its headers are too large",
            kind="invalid_request_error",
        )
    if status >= 500:
        return ApiError(status, "The server could not handle the request")
    return ApiError(400, "The request is not valid HTTP", kind="invalid_request_error")


class JsonErrorRequestHandler(RequestHandler):
    """aiohttp's connection handler, with its own error responses in the API's shape."""

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:  # a response is already on its way: cut it
            raise ConnectionError("response already started")
        error = _refusal(exc, status)
        request_id = new_id("req")
        # The exception's text quotes the request's bytes: name its type only.
        log.info(
            "request refused before routing",
            extra={
                "request_id": request_id,
                "status": error.status,
                "reason": type(exc).__name__ if exc else None,
            },
        )
        response = render_error(error)
        response.headers["request-id"] = request_id
        response.headers["Server"] = SERVER
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.force_close()
        return response


class JsonErrorServer(web.Server):
    def __call__(self) -> RequestHandler:
        return JsonErrorRequestHandler(self, loop=self._loop, **self._kwargs)


def expecting_only_continue(
    handle: Callable[[BaseRequest], Awaitable[web.StreamResponse]],
) -> Callable[[BaseRequest], Awaitable[web.StreamResponse]]:
    """``handle`` for requests whose ``Expect`` header, if any, is ``100-continue``: any
    other expectation is ignored (RFC 9110 lets a server do so). aiohttp refuses one
    before routing and before any middleware, with a bare-text 417 that quotes the
    header and carries no request id."""

    async def handled(request: BaseRequest) -> web.StreamResponse:
        expect = request.headers.get(hdrs.EXPECT)
        if expect is not None and expect.strip().lower() != "100-continue":
            headers = request.headers.copy()
            del headers[hdrs.EXPECT]
            request = request.clone(headers=headers)
        return await handle(request)

    return handled


class Runner(web.AppRunner):
    """``web.AppRunner`` whose connections use ``JsonErrorRequestHandler``."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = JsonErrorServer  # same state; only the handler class differs
        server.request_handler = expecting_only_continue(server.request_handler)
        return server


class UndecodableBody(logging.Filter):
    """Drops aiohttp's "Unhandled exception" about a request body that its
    Content-Encoding could not decode: raised again while aiohttp drains the body after
    the answer, which was already a 400 (``service.http.inputs``), and whose traceback
    names the header's value (SPEC §9: no header value in a log line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(getattr(exc, "__cause__", None), PayloadEncodingError)


def runner_for(app: web.Application, settings: Settings, **kwargs: Any) -> Runner:
    aiohttp_log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, UndecodableBody) for f in aiohttp_log.filters):
        aiohttp_log.addFilter(UndecodableBody())
    return Runner(
        app,
        keepalive_timeout=settings.header_timeout,
        shutdown_timeout=settings.shutdown_timeout,
        access_log=None,  # service.http.middleware writes the access log
        **kwargs,
    )


# How long a thread may hold the GIL while another waits for it (CPython's default: 5 ms).
# A search's query is encoded in a thread that needs the GIL a few times per query (the
# tokenizer, the model's inputs, pooling); each time the event loop is busy it waited up
# to the whole interval: with the loop kept busy, a query took 14 ms to encode instead of
# 3 at 5 ms, and 3.7 ms at 0.2 ms (a thread encoding while the main thread spins).
SWITCH_INTERVAL_S = 0.0002


def serve(
    app: web.Application,
    settings: Settings,
    *,
    until_ready: Callable[[], Awaitable[object]],
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully (as ``web.run_app``).

    ``on_ready`` is called once the app's start-up (database, migrations, bootstrap) is
    done, the socket listens and ``until_ready`` has returned (``mneme serve``: the
    embedding model is loaded, so ``/readyz`` answers 200). It is never called if that
    never returns (the model failed to load: the log says why).
    """
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    if (warning := issuer_warning(settings)) is not None:
        log.warning(warning)

    async def main() -> None:
        runner = runner_for(app, settings, handle_signals=True)
        await runner.setup()
        try:
            await web.TCPSite(runner, settings.host, settings.port).start()
            await until_ready()
            if on_ready is not None:
                on_ready()
            await asyncio.Event().wait()  # until a signal raises GracefulExit
        finally:
            await runner.cleanup()

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    task = loop.create_task(main())
    try:
        loop.run_until_complete(task)
    except (GracefulExit, KeyboardInterrupt):
        pass
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(task)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
