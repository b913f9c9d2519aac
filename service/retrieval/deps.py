"""What a search runs on, passed in explicitly (``service.retrieval.engine.search``): the
pools, the model, the snapshots, and the batches written off the response path."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from embeddings import Embedder
from embeddings.batcher import QueryEncoder
from service.ops.meter import Meter
from service.ops.metrics import Metrics
from service.ops.toucher import Toucher
from service.retrieval.snapshots import Snapshots
from service.retrieval.speaker_names import SpeakerNames


def untimed(name: str, seconds: float) -> None:
    """A search's spans, where nobody reads them."""


@dataclass(frozen=True)
class SearchDeps:
    """What one search runs on. ``phase`` records a named span of its time (the HTTP
    face's ``Server-Timing``); the model may still be loading (``None``)."""

    cache_pool: asyncpg.Pool  # the primary, planned once: the answer cache
    read_pool: asyncpg.Pool  # where reads go (a standby with MNEME_READ_DATABASE_URL)
    read_planned_once_pool: asyncpg.Pool
    embedder: Embedder | None
    queries: QueryEncoder | None
    snapshots: Snapshots
    speaker_names: SpeakerNames  # each store's, kept while its speakers are unchanged
    meter: Meter
    toucher: Toucher
    metrics: Metrics
    phase: Callable[[str, float], None] = untimed
