"""The toucher: ``last_used_at`` stamps of the memories searches return, batched in memory
and written off the response path (``service.queries.uses.touch``)."""

from __future__ import annotations

import asyncio
from typing import Any

from service.queries.uses import touch


class Toucher:
    """Batches ``last_used_at = now()`` for returned memories, off the response path."""

    def __init__(self) -> None:
        self.pending: dict[str, set[str]] = {}
        self.wake = asyncio.Event()

    def add(self, workspace_id: str, ids: list[str]) -> None:
        self.pending.setdefault(workspace_id, set()).update(ids)
        self.wake.set()

    async def flush(self, pool: Any) -> None:
        """Write the pending stamps. What a failed flush did not write stays pending for
        the next one (as ``Meter`` keeps its units): a lost stamp would change retention
        and ranking."""
        batch, self.pending = self.pending, {}
        written: set[str] = set()
        try:
            for workspace_id, ids in batch.items():
                if ids:
                    await touch(pool, workspace_id, sorted(ids))
                written.add(workspace_id)
        except BaseException:
            for workspace_id, ids in batch.items():
                if workspace_id not in written:
                    self.pending.setdefault(workspace_id, set()).update(ids)
            raise
