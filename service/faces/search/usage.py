"""``GET /api/v1/usage``: billed units per day and endpoint."""

from __future__ import annotations

from aiohttp import web

from service.app_keys import METER, POOL
from service.http.days import day_range
from service.http.json import json_response
from service.http.middleware import principal_of
from service.queries import usage


async def get_usage(request: web.Request) -> web.Response:
    """``GET /api/v1/usage?from=YYYY-MM-DD&to=YYYY-MM-DD``: billed units per day and endpoint."""
    start, end = day_range(request.query)
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
