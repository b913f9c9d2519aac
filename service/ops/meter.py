"""Billed units gathered in memory and written in one statement per flush
(``service.queries.usage.record_many``)."""

from __future__ import annotations

import asyncio

from service.queries import Conn, usage


class Meter:
    """Billed units gathered in memory and written in one statement per flush.

    Sixteen concurrent searches of one workspace would otherwise queue on the same
    ``usage_daily`` row, each with its own commit; the service flushes every
    ``service.ops.jobs.FLUSH_S`` seconds, before answering ``GET /api/v1/usage`` and when it
    stops.
    """

    def __init__(self) -> None:
        self.pending: dict[tuple[str, str], tuple[int, float]] = {}
        # One flush at a time: a flush that returns has every unit added before it
        # written, including those a flush already in flight had taken (GET
        # /api/v1/usage flushes, then reads; it must not read before that commit).
        self._flushing = asyncio.Lock()

    def add(self, workspace_id: str, endpoint: str, units: float) -> None:
        requests, total = self.pending.get((workspace_id, endpoint), (0, 0.0))
        self.pending[workspace_id, endpoint] = (requests + 1, total + units)

    async def flush(self, conn: Conn) -> None:
        async with self._flushing:
            await self._flush(conn)

    async def _flush(self, conn: Conn) -> None:
        batch, self.pending = self.pending, {}
        if not batch:
            return
        try:
            await usage.record_many(conn, batch)
        except BaseException:
            for (w, e), (r, n) in batch.items():  # keep them for the next flush
                requests, total = self.pending.get((w, e), (0, 0.0))
                self.pending[w, e] = (requests + r, total + n)
            raise
