"""Mneme for the OpenAI Agents SDK: ``mneme_tools`` and ``MnemeSession``.

``pip install "mneme-client[openai-agents]"``.

- ``mneme_tools(store="default")``: ``remember`` and ``recall`` as the SDK's function
  tools, for ``Agent(tools=...)``.
- ``MnemeSession(session_id, store="default")``: the SDK's ``Session`` protocol
  (``get_items``, ``add_items``, ``pop_item``, ``clear_session``) keeping a conversation's
  items in Mneme, one path memory each (``sessions/<session_id>/<n>``, the item as JSON),
  so a conversation survives the process and is shared by every replica.

Both use the async client with ``api_key`` / ``base_url``, else ``MNEME_API_KEY`` /
``MNEME_URL``; what they read passes Mneme's readability rule for that key.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents import Tool, function_tool
from agents.items import TResponseInputItem
from agents.memory.session import SessionABC

from mneme_client import _tools
from mneme_client._async import AsyncMneme
from mneme_client._types import StoreMemory

DIGITS = 12  # item numbers as fixed-width paths, so path order is the conversation's


def mneme_tools(
    store: str = "default",
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    scope: str | None = None,
) -> list[Tool]:
    """``remember`` and ``recall`` over one store; ``scope`` is given to what ``remember``
    writes (``workspace`` unless set)."""
    client = AsyncMneme(api_key, base_url)

    @function_tool
    async def remember(text: str) -> str:
        """Remember a fact, preference or event for later conversations.

        Args:
            text: the fact, in one self-contained sentence.
        """
        memory = await _tools.remember(client, store, scope, text)
        return f"remembered {memory.id}"

    @function_tool
    async def recall(query: str, max_results: int = 5) -> list[dict[str, Any]]:
        """Recall what was remembered that bears on a question, best first.

        Args:
            query: the question or topic, in words.
            max_results: how many memories to return (5-20).
        """
        return await _tools.recall(client, store, query, max_results)

    return [remember, recall]


class MnemeSession(SessionABC):
    """A conversation's items in a Mneme store, in order."""

    def __init__(
        self,
        session_id: str,
        store: str = "default",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
    ) -> None:
        if not session_id or "/" in session_id:
            raise ValueError("session_id must be a non-empty string without '/'")
        self.session_id = session_id
        self.store = store
        self.prefix = f"sessions/{session_id}/"
        self.client = AsyncMneme(api_key, base_url)
        self._lock = asyncio.Lock()  # this process's writers take turns numbering items

    async def _entries(self) -> list[StoreMemory]:
        found = self.client.stores.list_memories(self.store, self.prefix, limit=100)
        return [m async for m in found]

    async def _read(self, entries: list[StoreMemory]) -> list[TResponseInputItem]:
        read = await asyncio.gather(*(self.client.stores.read(self.store, m.id) for m in entries))
        items: list[TResponseInputItem] = [json.loads(m.content or "null") for m in read]
        return items

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit``, only the latest that many."""
        entries = await self._entries()
        if limit is not None:
            entries = entries[-limit:] if limit > 0 else []
        return await self._read(entries)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        async with self._lock:
            entries = await self._entries()
            after = int(entries[-1].path.rsplit("/", 1)[1]) + 1 if entries else 0
            for n, item in enumerate(items, start=after):
                path = f"{self.prefix}{n:0{DIGITS}d}"
                await self.client.stores.write(self.store, path, json.dumps(item))

    async def pop_item(self) -> TResponseInputItem | None:
        async with self._lock:
            entries = await self._entries()
            if not entries:
                return None
            [item] = await self._read(entries[-1:])
            await self.client.delete(entries[-1].id)
            return item

    async def clear_session(self) -> None:
        async with self._lock:
            entries = await self._entries()
            await asyncio.gather(*(self.client.delete(m.id) for m in entries))
