"""Typed keys for what the application holds: settings, pool, embedder, metrics, routes,
and the batches written off the response path."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import asyncpg
from aiohttp import web

from embeddings import Embedder
from embeddings.batcher import QueryEncoder
from embeddings.worker import QueueProbe
from service.http.outage import Outage
from service.http.route import Route
from service.ops.meter import Meter
from service.ops.metrics import Metrics
from service.ops.toucher import Toucher
from service.retrieval.snapshots import Snapshots
from service.settings import Settings


@dataclass
class EmbedderSlot:
    """The embedding model, loaded in the background after start-up.

    ``state`` is what ``/readyz`` reports: ``loading``, ``ready`` or ``failed``.
    """

    state: str = "loading"
    embedder: Embedder | None = None
    queries: QueryEncoder | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def set(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.queries = QueryEncoder(embedder)
        self.state = "ready"
        self.ready.set()


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
POOL = web.AppKey("pool", asyncpg.Pool)
# The database the pools connect to (for work that needs a connection of its own).
DATABASE_URL = web.AppKey("database_url", str)
# Connections that plan each statement once (generic plans), for statements whose best plan
# never depends on their values (service.ops.db.PLANNED_ONCE_SETTINGS says which).
PLANNED_ONCE_POOL = web.AppKey("planned_once_pool", asyncpg.Pool)
# The same two for reads that may lag the primary a little (MNEME_READ_DATABASE_URL, a hot
# standby; the primary's pools without one): browse, search, store listings, versions.
READ_POOL = web.AppKey("read_pool", asyncpg.Pool)
READ_PLANNED_ONCE_POOL = web.AppKey("read_planned_once_pool", asyncpg.Pool)
# Small stores' vectors and postings in memory, for search (service.retrieval.snapshots).
SNAPSHOTS = web.AppKey("snapshots", Snapshots)
METRICS: web.AppKey[Metrics] = web.AppKey("metrics")
ROUTE_SPECS: web.AppKey[dict[web.AbstractRoute, Route]] = web.AppKey("route_specs")
EMBEDDER = web.AppKey("embedder", EmbedderSlot)
# Off the response path: last-use stamps and billed units, gathered and written in batches.
TOUCHER = web.AppKey("toucher", Toucher)
METER = web.AppKey("meter", Meter)
OUTAGE = web.AppKey("outage", Outage)
RECENT_KEYS = web.AppKey("recent_keys", RecentKeys)
# The embedding queue as /readyz and /metrics read it (bounded cost per probe).
QUEUE = web.AppKey("queue", QueueProbe)
