"""The app keys the HTTP shell reads: the settings, the pool the key check runs on, the
route table, the metrics, the outage report and the keys seen lately.

``service.app_keys`` names these too, beside what the faces and the lifetimes hold; the
shell imports only this module, so it loads neither the engines nor the jobs.
"""

from __future__ import annotations

import time
from collections import OrderedDict

import asyncpg
from aiohttp import web

from service.http.outage import Outage
from service.http.route import Route
from service.ops.metrics import Metrics
from service.settings import Settings


class RecentKeys:
    """Digests of keys that authenticated here lately: only their requests get a route's
    prefetch (work started while the key is being checked), so a caller without a valid
    key never makes the service do more than check it."""

    def __init__(self, ttl_s: float = 300.0, size: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.size = size
        self._seen: OrderedDict[bytes, float] = OrderedDict()

    def __contains__(self, digest: bytes) -> bool:
        at = self._seen.get(digest)
        return at is not None and time.monotonic() - at < self.ttl_s

    def add(self, digest: bytes) -> None:
        self._seen[digest] = time.monotonic()
        self._seen.move_to_end(digest)
        while len(self._seen) > self.size:
            self._seen.popitem(last=False)


SETTINGS = web.AppKey("settings", Settings)
# Connections that plan each statement once (generic plans), for statements whose best plan
# never depends on their values (service.ops.db.PLANNED_ONCE_SETTINGS says which): the
# key check runs on them.
PLANNED_ONCE_POOL = web.AppKey("planned_once_pool", asyncpg.Pool)
METRICS: web.AppKey[Metrics] = web.AppKey("metrics")
ROUTE_SPECS: web.AppKey[dict[web.AbstractRoute, Route]] = web.AppKey("route_specs")
OUTAGE = web.AppKey("outage", Outage)
RECENT_KEYS = web.AppKey("recent_keys", RecentKeys)
