"""JSON in and out: msgspec encoding, request-body decoding, timestamp format.

Timestamps leave the service as ISO 8601 UTC with milliseconds and ``Z``
(``2026-08-14T10:00:00.000Z``) on every face.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypeVar

import msgspec
from aiohttp import web

T = TypeVar("T")

_encoder = msgspec.json.Encoder()


def iso(ts: datetime) -> str:
    """``2026-08-14T10:00:00.000Z``: UTC, milliseconds, ``Z``."""
    ts = ts.astimezone(UTC)
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


def iso_or_none(ts: datetime | None) -> str | None:
    return None if ts is None else iso(ts)


def json_response(
    body: Any, *, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=_encoder.encode(body),
        status=status,
        content_type="application/json",
        headers=headers,
    )


async def read_body(request: web.Request, struct: type[T]) -> T:
    """Decode and validate the JSON body into ``struct``; any failure is a 400."""
    from service.errors import bad_request  # local: errors imports this module

    raw = await request.read()
    if not raw.strip():
        raise bad_request("Request body must be a JSON object")
    try:
        return msgspec.json.decode(raw, type=struct)
    except msgspec.ValidationError as exc:
        raise bad_request(f"Invalid request body: {exc}") from None
    except msgspec.DecodeError as exc:
        raise bad_request(f"Request body is not valid JSON: {exc}") from None


def parse_time(value: str, field: str) -> datetime:
    """RFC 3339 / ISO 8601: a date-time (no offset means UTC) or a date (midnight UTC)."""
    from service.errors import bad_request

    text = value.strip()
    try:
        ts = datetime.fromisoformat(text)
    except ValueError:
        raise bad_request(
            f"{field} must be an ISO 8601 timestamp such as 2026-08-14T10:00:00Z, got {value!r}",
            param=field,
        ) from None
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts
