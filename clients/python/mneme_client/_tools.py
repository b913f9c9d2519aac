"""What the framework integrations' ``remember`` and ``recall`` tools do, once
(``pydantic_ai``, ``openai_agents``): one write, one search, on the async client."""

from __future__ import annotations

from typing import Any

from mneme_client._async import AsyncMneme
from mneme_client._types import Memory

MIN_RESULTS, MAX_RESULTS = 5, 20  # the search API's max_results bounds


async def remember(client: AsyncMneme, store: str, scope: str | None, text: str) -> Memory:
    fields: dict[str, Any] = {"store": store} | ({"scope": scope} if scope else {})
    return await client.add(text, **fields)


async def recall(
    client: AsyncMneme, store: str, query: str, max_results: int
) -> list[dict[str, Any]]:
    """The best memories for ``query``, as a model reads them: id, text, similarity."""
    wanted = max(MIN_RESULTS, min(MAX_RESULTS, max_results))
    hits = await client.search(store, query, wanted)
    return [{"id": h.id, "text": h.content, "similarity": h.similarity} for h in hits]
