"""``GET /api/v1/usage``: billed units per day and endpoint."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

from aiohttp import web

from service.errors import bad_request
from service.jsonutil import json_response
from service.middleware import principal_of
from service.queries import usage
from service.state import METER, POOL

DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


async def get_usage(request: web.Request) -> web.Response:
    """``GET /api/v1/usage?from=YYYY-MM-DD&to=YYYY-MM-DD``: billed units per day and endpoint."""
    today = datetime.now(UTC).date()

    def day(name: str, default: date) -> date:
        raw = request.query.get(name)
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

    # Defaults: to is today, from 30 days before to; only a range given backwards is refused.
    end = day("to", today)
    start = day("from", end - timedelta(days=30) if end.toordinal() > 30 else date.min)
    if start > end:
        if request.query.get("to"):
            raise bad_request("from must not be after to")
        end = start  # only from, in the future: an empty range
    pool = request.app[POOL]
    await request.app[METER].flush(pool)  # this instance's pending units count too
    found = await usage.days(pool, principal_of(request).workspace_id, start, end)
    return json_response(
        {
            "data": [
                {
                    "day": d.day.isoformat(),
                    "endpoint": d.endpoint,
                    "requests": d.requests,
                    "units": round(d.units, 4),
                }
                for d in found
            ]
        }
    )
