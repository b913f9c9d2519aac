"""JSON out: a response whose body msgspec encodes (timestamps: ``service.times.iso``)."""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

_encoder = msgspec.json.Encoder()


def json_response(
    body: Any, *, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=_encoder.encode(body),
        status=status,
        content_type="application/json",
        headers=headers,
    )
