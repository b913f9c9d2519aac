"""Times as the service reads and writes them, on every face and door.

In: ``parse_time`` (RFC 3339 or a date, as a body or a tool names a timestamp). Out: ISO
8601 UTC with milliseconds and ``Z`` (``2026-08-14T10:00:00.000Z``, ``iso``).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from service.problems import Invalid

# RFC 3339's date-time, or a date, with ISO 8601's leniencies a person types: a space for
# the T, no seconds, no offset (UTC). Not the rest of what datetime.fromisoformat takes
# (2026-W28-2, 20260714T1505Z, 2026-07-14T15), which no client means as a timestamp.
TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    r"([Tt ][0-9]{2}:[0-9]{2}(:[0-9]{2}([.,][0-9]+)?)?([Zz]|[+-][0-9]{2}(:?[0-9]{2})?)?)?"
)


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


_MICROSECOND = timedelta(microseconds=1)


def parse_time(value: str, field: str) -> datetime:
    """RFC 3339 / ISO 8601: a date-time (no offset means UTC) or a date (midnight UTC).

    Returned in UTC, which must lie within the years 1 to 9999: an offset that moves a
    time past either end (``9999-12-31T23:00:00-05:00``) is refused, not wrapped. The
    very first and last instants (``0001-01-01``, ``9999-12-31T23:59:59.999999Z``) come
    back one microsecond inside: asyncpg would store them as -infinity and infinity, and
    times leave the service with milliseconds, so the shift never shows.
    """
    text = value.strip()
    try:
        if not TIMESTAMP.fullmatch(text):
            raise ValueError(text)
        ts = datetime.fromisoformat(text.upper())  # RFC 3339 allows a t and a z
    except ValueError:
        raise Invalid(
            f"{field} must be an ISO 8601 timestamp such as 2026-08-14T10:00:00Z", param=field
        ) from None
    try:
        ts = ts.replace(tzinfo=UTC) if ts.tzinfo is None else utc(ts)
    except (OverflowError, ValueError):
        raise Invalid(f"{field} must lie within the years 1 to 9999 in UTC", param=field) from None
    if ts.replace(tzinfo=None) == datetime.min:
        return ts + _MICROSECOND
    if ts.replace(tzinfo=None) == datetime.max:
        return ts - _MICROSECOND
    return ts
