"""``from`` and ``to`` query parameters: a range of UTC days, as the usage and activity
endpoints take them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta

from service.http.errors import bad_request

DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def _day(query: Mapping[str, str], name: str, default: date) -> date:
    raw = query.get(name)
    if not raw:
        return default
    try:
        if not DAY.fullmatch(raw):  # date.fromisoformat also takes 20260814, 2026-W33-5
            raise ValueError(raw)
        return date.fromisoformat(raw)
    except ValueError:
        raise bad_request(
            f"{name} must be a date like 2026-08-14, got {raw!r}", param=name
        ) from None


def day_range(query: Mapping[str, str]) -> tuple[date, date]:
    """``(from, to)``, both included. Defaults: ``to`` is today (UTC), ``from`` 30 days
    before ``to``; only a range given backwards is refused (``from`` alone, in the future:
    an empty range)."""
    end = _day(query, "to", datetime.now(UTC).date())
    start = _day(query, "from", end - timedelta(days=30) if end.toordinal() > 30 else date.min)
    if start > end:
        if query.get("to"):
            raise bad_request("from must not be after to")
        end = start
    return start, end
