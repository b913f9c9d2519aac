"""``GET /api/v1/activity``: memories written per day and store (the page's Overview)."""

from __future__ import annotations

from aiohttp import web

from service.app_keys import POOL
from service.http.days import day_range
from service.http.json import json_response
from service.http.middleware import principal_of
from service.problems import Invalid
from service.queries import activity

MAX_DAYS = 366


async def get_activity(request: web.Request) -> web.Response:
    """``?from=YYYY-MM-DD&to=YYYY-MM-DD`` (default: the last 30 days): for each UTC day and
    store, how many of the memories created that day the key may read (whatever their
    status now). Days and stores with none are left out."""
    start, end = day_range(request.query)
    if (end - start).days >= MAX_DAYS:
        raise Invalid(f"from and to may span at most {MAX_DAYS} days")
    found = await activity.written_per_day(request.app[POOL], principal_of(request), start, end)
    return json_response(
        {
            "data": [
                {"day": w.day.isoformat(), "store": w.store, "written": w.written} for w in found
            ]
        }
    )
