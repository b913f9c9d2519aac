"""What both clients share: configuration, building a request, the retry rule, reading
the answer. Only the I/O (send, sleep) differs between ``Mneme`` and ``AsyncMneme``."""

from __future__ import annotations

import contextlib
import email.utils
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

import httpx

from mneme_client._call import Call
from mneme_client._errors import APIError, AuthenticationError, MnemeError, error_for

T = TypeVar("T")

VERSION = "0.1.0"
DEFAULT_URL = "http://127.0.0.1:8080"
# 429 is refused before anything runs; a 503 either wrote nothing or is replayed by its
# Idempotency-Key, so both are safe to retry.
RETRIED = frozenset({429, 503})
BACKOFF_S = 0.5  # without Retry-After: 0.5 s, 1 s, 2 s, …


H = TypeVar("H", httpx.Client, httpx.AsyncClient)


class Base(Generic[H]):
    """Configuration and the I/O-free half of sending a call. ``own``: whether ``http``
    was made here (and so is closed by ``close()``)."""

    def __init__(
        self,
        api_key: str | None,
        base_url: str | None,
        timeout: float,
        max_retries: int,
        http: H | None,
        make_http: Callable[[], H],
    ) -> None:
        key = api_key or os.environ.get("MNEME_API_KEY")
        if not key:
            raise AuthenticationError(
                "No API key: pass api_key= or set MNEME_API_KEY", type="authentication_error"
            )
        self.base_url = (base_url or os.environ.get("MNEME_URL") or DEFAULT_URL).rstrip("/")
        self.timeout = timeout
        self.max_retries = max_retries
        self._headers = {
            "Authorization": f"Bearer {key}",
            "Accept": "application/json",
            "User-Agent": f"mneme-client/{VERSION}",
        }
        self.own = http is None
        self.http: H = make_http() if http is None else http

    def _request(self, call: Call[T]) -> httpx.Request:
        """The request, built once: every retry sends the same bytes and Idempotency-Key."""
        headers = {**self._headers, **(call.headers or {})}
        content = None
        if call.json is not None:
            content = _json_bytes(call.json)
            headers["Content-Type"] = "application/json"
        if call.write:
            headers["Idempotency-Key"] = str(uuid.uuid4())
        return self.http.build_request(
            call.method, self.base_url + call.path, params=call.params, content=content,
            headers=headers, timeout=self.timeout,
        )  # fmt: skip

    def _wait(self, response: httpx.Response, attempt: int) -> float | None:
        """Seconds to wait before retrying, or ``None`` to answer now."""
        if response.status_code not in RETRIED or attempt >= self.max_retries:
            return None
        after = retry_after(response.headers.get("Retry-After"))
        return BACKOFF_S * 2**attempt if after is None else after

    def _result(self, call: Call[T], response: httpx.Response) -> T:
        if response.status_code >= 400:
            raise error_for(
                response.status_code, response.content, response.headers.get("request-id")
            )
        return call.parse(response.json() if response.content else None)


def _json_bytes(body: Any) -> bytes:
    """UTF-8 JSON; a string that UTF-8 cannot carry (a lone surrogate) goes as a \\u
    escape instead, for the API to refuse with a 400 as it refuses any bad input."""
    try:
        return json.dumps(body, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(body).encode()


def retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds: a number, or an HTTP date."""
    if value is None:
        return None
    with contextlib.suppress(ValueError):
        return max(0.0, float(value))
    with contextlib.suppress(TypeError, ValueError):
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    return None


@contextlib.contextmanager
def reaching(url: str, timeout: float) -> Iterator[None]:
    """No answer at all is an error without a status: an ``APIError`` (``timeout_error``)
    past ``timeout`` seconds, else a ``MnemeError`` (``connection_error``: refused, reset)."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise APIError(f"No answer from {url} within {timeout} s", type="timeout_error") from exc
    except httpx.TransportError as exc:
        raise MnemeError(f"No answer from {url}: {exc!r}", type="connection_error") from exc
