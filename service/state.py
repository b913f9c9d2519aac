"""Typed keys for what the application holds: settings, pool, metrics, route table."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import asyncpg
from aiohttp import web

from service.settings import Settings

if TYPE_CHECKING:
    from service.metrics import Metrics
    from service.routes import Route


@dataclass
class Health:
    """What ``/readyz`` reports beyond a live database query."""

    model: str = "not_loaded"
    extra: dict[str, str] = field(default_factory=dict)


SETTINGS = web.AppKey("settings", Settings)
POOL = web.AppKey("pool", asyncpg.Pool)
METRICS: web.AppKey[Metrics] = web.AppKey("metrics")
ROUTE_SPECS: web.AppKey[dict[web.AbstractRoute, Route]] = web.AppKey("route_specs")
HEALTH = web.AppKey("health", Health)
