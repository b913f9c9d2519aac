"""Times a request names: timestamps in bodies (``parse_time``, RFC 3339 or a date) and
``from``/``to`` query parameters, a range of UTC days, as the usage and activity endpoints
take them (``day_range``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta

from service.http.errors import bad_request
from service.http.json import utc

DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
# RFC 3339's date-time, or a date, with ISO 8601's leniencies a person types: a space for
# the T, no seconds, no offset (UTC). Not the rest of what datetime.fromisoformat takes
# (2026-W28-2, 20260714T1505Z, 2026-07-14T15), which no client means as a timestamp.
TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    r"([Tt ][0-9]{2}:[0-9]{2}(:[0-9]{2}([.,][0-9]+)?)?([Zz]|[+-][0-9]{2}(:?[0-9]{2})?)?)?"
)


def _day(query: Mapping[str, str], name: str, default: date) -> date:
    """A UTC day: a date, or the UTC date of a timestamp (``parse_time``'s forms)."""
    raw = query.get(name)
    if not raw:
        return default
    if not DAY.fullmatch(raw):  # date.fromisoformat also takes 20260814, 2026-W33-5
        if TIMESTAMP.fullmatch(raw.strip()):
            return parse_time(raw, name).date()
        raise _not_a_day(name, raw)
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise _not_a_day(name, raw) from None


def _not_a_day(name: str, raw: str) -> Exception:
    return bad_request(
        f"{name} must be a date like 2026-08-14 (or a timestamp), got {raw!r}", param=name
    )


def day_range(query: Mapping[str, str]) -> tuple[date, date]:
    """``(from, to)``, both included; a timestamp names its UTC day. Defaults: ``to`` is
    today (UTC), ``from`` 30 days before ``to``; only a range given backwards is refused
    (``from`` alone, in the future: an empty range)."""
    end = _day(query, "to", datetime.now(UTC).date())
    start = _day(query, "from", end - timedelta(days=30) if end.toordinal() > 30 else date.min)
    if start > end:
        if query.get("to"):
            raise bad_request("from must not be after to")
        end = start
    return start, end


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
