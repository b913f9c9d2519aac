"""``from``/``to`` query parameters: a range of UTC days, as the usage and activity
endpoints take them (``day_range``; a timestamp names its UTC day)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta

from service.problems import Invalid
from service.times import TIMESTAMP, parse_time

DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


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
    return Invalid(
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
            raise Invalid("from must not be after to")
        end = start
    return start, end
