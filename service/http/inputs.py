"""What a request's strings and body must be before anything reads them.

Query parameters and path segments are checked for every request
(``input_middleware``): text PostgreSQL can store (``service.decoding.string_problem``),
and no query parameter given twice (lists are one comma-separated value). JSON bodies are
decoded by ``service.decoding.decode_json``, the same rules as every other way in.

Bodies are read under a deadline (``MNEME_BODY_TIMEOUT`` and a second per 100 kB
declared: 408 past it), and a client that goes away mid-body is answered 400 (it will
not see it) rather than logged as a failure of the service.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

from aiohttp import web
from aiohttp.http_exceptions import PayloadEncodingError

from service.decoding import decode_json, string_problem
from service.http.errors import ApiError
from service.http.keys import SETTINGS
from service.http.route import Handler
from service.problems import Invalid

T = TypeVar("T")


# Tokens the service made and reads back itself: whatever is not one of them is ignored
# (SPEC §3.2: a malformed browse cursor scans from the top), NUL included.
OPAQUE = frozenset({"cursor"})
# The browse face's comma-separated lists: a repeat (tier=core&tier=hindsight) adds items.
LISTS = frozenset({"tier", "factType", "notFactType", "status"})


def check_request_strings(request: web.Request) -> None:
    """Every query parameter (name and value) and path segment can be stored as text."""
    for name, value in request.match_info.items():
        if (problem := string_problem(value)) is not None:
            raise Invalid(f"Path parameter {name} {problem}", param=name)
    for name, value in request.query.items():
        if (problem := string_problem(name)) is not None:
            raise Invalid(f"A query parameter name {problem}")
        if name not in LISTS and len(request.query.getall(name)) > 1:
            # Any other repeat would be silently half-read.
            raise Invalid(f"Query parameter {name} is given more than once", param=name)
        if name in OPAQUE:
            continue
        if (problem := string_problem(value)) is not None:
            raise Invalid(f"Query parameter {name} {problem}", param=name)


@web.middleware
async def input_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    check_request_strings(request)
    return await handler(request)


# A body's deadline grows with its declared size at this rate (bytes a second): a slow
# link still sends 16 MiB in time, a trickle of a few bytes still times out.
SLOWEST_BODY_RATE = 100_000


BODY = web.RequestKey("body", asyncio.Future)


async def body_of(request: web.Request) -> bytes:
    """The request's body, whole, within its deadline: ``MNEME_BODY_TIMEOUT`` seconds and
    one more per 100 kB it declares.

    Read once, by whoever asks first (a route's prefetch may, while the key is checked):
    every caller gets the same bytes, or the same failure."""
    reading = request.get(BODY)
    if reading is None:
        reading = asyncio.ensure_future(_read_body(request))
        # Retrieved even if the one who asked went away (a prefetch cancelled with its 401).
        reading.add_done_callback(lambda f: f.cancelled() or f.exception())
        request[BODY] = reading
    body: bytes = await asyncio.shield(reading)
    return body


def abandon_body(request: web.Request) -> None:
    """Stop a read of the body still waiting for it (nobody will use it)."""
    reading = request.get(BODY)
    if reading is not None and not reading.done():
        reading.cancel()


async def _read_body(request: web.Request) -> bytes:
    settings = request.app[SETTINGS]
    declared = request.content_length or 0
    if declared > settings.max_body_bytes:  # refused before waiting for bytes never sent
        raise web.HTTPRequestEntityTooLarge(max_size=settings.max_body_bytes, actual_size=declared)
    timeout = settings.body_timeout + declared / SLOWEST_BODY_RATE
    try:
        async with asyncio.timeout(timeout):
            return await request.read()
    except TimeoutError:
        raise ApiError(408, f"The request body did not arrive within {timeout:g} seconds") from None
    except (ConnectionError, web.RequestPayloadError) as exc:
        if isinstance(exc.__cause__, PayloadEncodingError):
            raise Invalid(
                "The request body could not be decoded as its Content-Encoding "
                "says (gzip, deflate, br)"
            ) from None
        raise Invalid("The connection closed before the request body was complete") from None


async def read_body(request: web.Request, struct: type[T]) -> T:
    """Read, decode and validate the JSON body into ``struct``; any failure is a 4xx."""
    raw = await body_of(request)
    if not raw.strip():
        raise Invalid("Request body must be a JSON object")
    return decode_json(raw, struct)
