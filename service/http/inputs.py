"""What a request's strings and JSON must be before anything reads them.

PostgreSQL's ``text`` cannot hold NUL (U+0000), and a lone surrogate cannot be encoded as
UTF-8: either would fail deep inside a query as a 500. So they are refused at the door,
as a 400 naming the parameter:

- query parameters and path segments, for every request (``input_middleware``), which
  also refuses a query parameter given twice (lists are one comma-separated value);
- JSON bodies, when they are decoded (``decode_json``): any string, key or value, at
  any depth, named by its path (``metadata.k``, ``filters.entity[1]``). JSON cannot
  carry a raw NUL byte or a lone surrogate escape (msgspec refuses both as malformed),
  so only a ``\\u0000`` escape needs looking for, and the body is walked only when it
  has one. A batch of memories checks each item as it comes to it (``check_strings``),
  so the first failing item decides the answer, whatever it fails on.

A JSON body nested deeper than the decoder allows is a 400 too, not a RecursionError.
Bodies are read under a deadline (``MNEME_BODY_TIMEOUT`` and a second per 100 kB
declared: 408 past it), and a client that goes away mid-body is answered 400 (it will
not see it) rather than logged as a failure of the service.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
from aiohttp import web
from aiohttp.http_exceptions import PayloadEncodingError

from service.app_keys import SETTINGS
from service.http.errors import ApiError, bad_request

T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# Tokens the service made and reads back itself: whatever is not one of them is ignored
# (SPEC §3.2: a malformed browse cursor scans from the top), NUL included.
OPAQUE = frozenset({"cursor"})
# The browse face's comma-separated lists: a repeat (tier=core&tier=hindsight) adds items.
LISTS = frozenset({"tier", "factType", "notFactType", "status"})


def string_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as text, or ``None``."""
    if "\x00" in value:
        return "must not contain NUL (\\u0000) characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    return None


def check_request_strings(request: web.Request) -> None:
    """Every query parameter (name and value) and path segment can be stored as text."""
    for name, value in request.match_info.items():
        if (problem := string_problem(value)) is not None:
            raise bad_request(f"Path parameter {name} {problem}", param=name)
    for name, value in request.query.items():
        if (problem := string_problem(name)) is not None:
            raise bad_request(f"A query parameter name {problem}")
        if name not in LISTS and len(request.query.getall(name)) > 1:
            # Any other repeat would be silently half-read.
            raise bad_request(f"Query parameter {name} is given more than once", param=name)
        if name in OPAQUE:
            continue
        if (problem := string_problem(value)) is not None:
            raise bad_request(f"Query parameter {name} {problem}", param=name)


@web.middleware
async def input_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    check_request_strings(request)
    return await handler(request)


def _nul_path(value: Any) -> str | None:
    """The JSON path of a string (or key) holding NUL, if any; walks without recursion."""
    stack: list[tuple[str, Any]] = [("$", value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            if "\x00" in node:
                return path
        elif isinstance(node, dict):
            for key, item in node.items():
                if "\x00" in key:
                    return path
                stack.append((f"{path}.{key}", item))
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(node))
    return None


def check_strings(value: Any) -> None:
    """400 naming a string of a decoded value (a struct too) that holds a NUL."""
    path = _nul_path(msgspec.to_builtins(value))
    if path is not None:
        _refuse(path)


def _refuse(path: str) -> None:
    message = f"{path.removeprefix('$.')} must not contain NUL (\\u0000) characters"
    if path == "$":
        raise bad_request(message)
    raise bad_request(message, param=path.removeprefix("$."))


def check_json_strings(raw: bytes) -> None:
    """400 naming a string of a JSON document that holds a NUL."""
    if b"\\u0000" not in raw:
        return
    try:
        path = _nul_path(msgspec.json.decode(raw))
    except (msgspec.DecodeError, RecursionError):
        return  # not valid JSON: the decoder's own error says so
    if path is not None:
        _refuse(path)


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
            raise bad_request("The request body could not be decoded as its Content-Encoding "
                              "says (gzip, deflate, br)") from None  # fmt: skip
        raise bad_request("The connection closed before the request body was complete") from None


async def read_body(request: web.Request, struct: type[T]) -> T:
    """Read, decode and validate the JSON body into ``struct``; any failure is a 4xx."""
    raw = await body_of(request)
    if not raw.strip():
        raise bad_request("Request body must be a JSON object")
    return decode_json(raw, struct)


def decode_json(
    raw: bytes | msgspec.Raw, type_: type[T], *, what: str = "Request body", strings: bool = True
) -> T:
    """Decode and validate a JSON document; every failure is a 400 that says why.

    ``strings=False``: a part of a document whose strings were checked already.
    """
    try:
        value = msgspec.json.decode(raw, type=type_)
    except msgspec.ValidationError as exc:
        if str(exc).startswith("Expected `object`") and " - at " not in str(exc):
            raise bad_request(f"{what} must be a JSON object") from None
        raise bad_request(f"Invalid {what[0].lower()}{what[1:]}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise bad_request(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise bad_request(f"{what} is nested too deeply") from None
    if strings:
        check_json_strings(bytes(raw))
    return value
