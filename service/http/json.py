"""JSON in and out: msgspec encoding, request-body decoding, timestamp format.

Timestamps leave the service as ISO 8601 UTC with milliseconds and ``Z``
(``2026-08-14T10:00:00.000Z``) on every face.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import msgspec
from aiohttp import web

T = TypeVar("T")

_encoder = msgspec.json.Encoder()


def utc(ts: datetime) -> datetime:
    """``ts`` in UTC. A value already in UTC is taken as it is: converting it again would
    step outside the calendar for the first and last hours of years 1 and 9999."""
    return ts if ts.utcoffset() == timedelta(0) else ts.astimezone(UTC)


def iso(ts: datetime) -> str:
    """``2026-08-14T10:00:00.000Z``: UTC, milliseconds, ``Z``."""
    ts = utc(ts)
    # Not strftime: its %Y drops the leading zeros of years before 1000.
    return (
        f"{ts.year:04d}-{ts.month:02d}-{ts.day:02d}T{ts.hour:02d}:{ts.minute:02d}:"
        f"{ts.second:02d}.{ts.microsecond // 1000:03d}Z"
    )


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


_MICROSECOND = timedelta(microseconds=1)


def parse_time(value: str, field: str) -> datetime:
    """RFC 3339 / ISO 8601: a date-time (no offset means UTC) or a date (midnight UTC).

    Returned in UTC, which must lie within the years 1 to 9999: an offset that moves a
    time past either end (``9999-12-31T23:00:00-05:00``) is refused, not wrapped. The
    very first and last instants (``0001-01-01``, ``9999-12-31T23:59:59.999999Z``) come
    back one microsecond inside: asyncpg would store them as -infinity and infinity, and
    times leave the service with milliseconds, so the shift never shows.
    """
    from service.http.errors import bad_request

    text = value.strip()
    try:
        ts = datetime.fromisoformat(text)
    except ValueError:
        raise bad_request(
            f"{field} must be an ISO 8601 timestamp such as 2026-08-14T10:00:00Z", param=field
        ) from None
    try:
        ts = ts.replace(tzinfo=UTC) if ts.tzinfo is None else utc(ts)
    except (OverflowError, ValueError):
        raise bad_request(
            f"{field} must lie within the years 1 to 9999 in UTC", param=field
        ) from None
    if ts.replace(tzinfo=None) == datetime.min:
        return ts + _MICROSECOND
    if ts.replace(tzinfo=None) == datetime.max:
        return ts - _MICROSECOND
    return ts
