"""What a route is: its method, path, handler, the scope the calling key needs, and
how it answers (``service.routes`` lists them all)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Prefetch = Callable[[web.Request], Awaitable[None]]

READ, WRITE, ADMIN = "memory:read", "memory:write", "admin"


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Handler
    scope: str | None
    # Seed 003 wants error bodies with exactly "type" and "message": no extra fields.
    plain_errors: bool = False
    # Work to start while the key is checked (search: encode the query), for keys that
    # authenticated here lately (service.http.keys.RecentKeys). It must change nothing and
    # may fail silently: the handler runs, or not, as without it.
    prefetch: Prefetch | None = None
    # Takes OAuth access tokens as well as keys (``/mcp`` only: service.faces.oauth), and
    # a 401 says where to get one.
    tokens: bool = False
