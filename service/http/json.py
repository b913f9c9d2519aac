"""JSON out: msgspec encoding and the timestamp format.

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
