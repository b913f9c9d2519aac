"""Typed keys for what the application holds: the pools, the embedder, the snapshots, the
batches written off the response path, and (named here too, defined where the HTTP shell
reads them: ``service.http.keys``) the settings, metrics, routes and the key check's."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import asyncpg
from aiohttp import web

from embeddings import Embedder
from embeddings.batcher import QueryEncoder
from embeddings.worker import QueueProbe
from service.http.keys import (
    METRICS as METRICS,
    OUTAGE as OUTAGE,
    PLANNED_ONCE_POOL as PLANNED_ONCE_POOL,
    RECENT_KEYS as RECENT_KEYS,
    ROUTE_SPECS as ROUTE_SPECS,
    SETTINGS as SETTINGS,
    RecentKeys as RecentKeys,
)
from service.ops.meter import Meter
from service.ops.toucher import Toucher
from service.retrieval.snapshots import Snapshots
from service.retrieval.speaker_names import SpeakerNames


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


POOL = web.AppKey("pool", asyncpg.Pool)
# The database the pools connect to (for work that needs a connection of its own).
DATABASE_URL = web.AppKey("database_url", str)
# The same two for reads that may lag the primary a little (MNEME_READ_DATABASE_URL, a hot
# standby; the primary's pools without one): browse, search, store listings, versions.
READ_POOL = web.AppKey("read_pool", asyncpg.Pool)
READ_PLANNED_ONCE_POOL = web.AppKey("read_planned_once_pool", asyncpg.Pool)
# Small stores' vectors and postings in memory, for search (service.retrieval.snapshots).
SNAPSHOTS = web.AppKey("snapshots", Snapshots)
SPEAKER_NAMES = web.AppKey("speaker_names", SpeakerNames)
EMBEDDER = web.AppKey("embedder", EmbedderSlot)
# Off the response path: last-use stamps and billed units, gathered and written in batches.
TOUCHER = web.AppKey("toucher", Toucher)
METER = web.AppKey("meter", Meter)
# The embedding queue as /readyz and /metrics read it (bounded cost per probe).
QUEUE = web.AppKey("queue", QueueProbe)
