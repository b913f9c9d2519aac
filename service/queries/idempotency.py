"""Idempotency keys of writes: kept 24 hours, then pruned."""

from __future__ import annotations

from service.queries import Conn

PRUNE = "DELETE FROM idempotency_keys WHERE created_at < now() - interval '24 hours'"


async def prune(conn: Conn) -> None:
    await conn.execute(PRUNE)
