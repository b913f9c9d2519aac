"""Prometheus metrics, one registry per application (so test apps never share counters)."""

from __future__ import annotations

from collections.abc import Iterator

import asyncpg
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class PoolCollector(Collector):
    """Connection-pool use, read at scrape time."""

    def __init__(self) -> None:
        self.pool: asyncpg.Pool | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self.pool is None:
            return
        size = GaugeMetricFamily("mneme_db_pool_connections", "Pool connections", labels=["state"])
        total = self.pool.get_size()
        idle = self.pool.get_idle_size()
        size.add_metric(["in_use"], total - idle)
        size.add_metric(["idle"], idle)
        size.add_metric(["max"], self.pool.get_max_size())
        yield size


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.request_latency = Histogram(
            "mneme_http_request_duration_seconds",
            "Time to answer an HTTP request, per route",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.requests = Counter(
            "mneme_http_requests",
            "HTTP requests answered, per route and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.rate_limited = Counter(
            "mneme_rate_limited_requests",
            "Requests refused with 429",
            registry=self.registry,
        )
        self.embedding_queue = Gauge(
            "mneme_embedding_queue_depth",
            "Memories waiting for a vector",
            registry=self.registry,
        )
        self.embedding_lag = Gauge(
            "mneme_embedding_queue_lag_seconds",
            "Age of the oldest memory waiting for a vector",
            registry=self.registry,
        )
        self.embedded = Counter(
            "mneme_embedded_memories",
            "Memories embedded by this process's worker",
            registry=self.registry,
        )
        self.embed_batch = Histogram(
            "mneme_embedding_batch_seconds",
            "Time to chunk and encode one worker batch",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
            registry=self.registry,
        )
        self.retrievals = Counter(
            "mneme_search_retrievals",
            "Search retrievals, by what answered them: snapshot (a small store's snapshot in "
            "memory), checked (the snapshot's candidates checked in SQL), sql (the SQL arms)",
            ["path"],
            registry=self.registry,
        )
        self.snapshot_bytes = Gauge(
            "mneme_search_snapshot_bytes",
            "Memory held by search snapshots of small stores",
            registry=self.registry,
        )
        self.pool = PoolCollector()
        self.registry.register(self.pool)
        self._webhooks()

    def _webhooks(self) -> None:
        self.webhook_deliveries = Counter(
            "mneme_webhook_deliveries",
            "Webhook delivery attempts by this process's dispatcher, by outcome: delivered, "
            "retried (to be tried again), failed (given up), skipped (not the key's to read)",
            ["outcome"],
            registry=self.registry,
        )
        self.webhook_backlog = Gauge(
            "mneme_webhook_backlog",
            "Webhook deliveries waiting to be sent (counted up to 10000)",
            registry=self.registry,
        )
        self.webhook_failed = Gauge(
            "mneme_webhook_failed_last_day",
            "Webhook deliveries given up in the last 24 hours",
            registry=self.registry,
        )

    def observe_batch(self, embedded: int, seconds: float) -> None:
        self.embedded.inc(embedded)
        self.embed_batch.observe(seconds)
