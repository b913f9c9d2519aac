"""A LangChain retriever on Mneme's search: ``MnemeRetriever``, a ``BaseRetriever``.

``pip install "mneme-client[langchain]"``. ``MnemeRetriever(store="default", k=5)``
answers a query with the store's best memories as ``Document``s: the memory's text as
``page_content``; its id, kind (``memory``, ``self`` for the agent's own words, ``image``),
``similarity`` and the search answer's other fields in ``metadata``. ``k`` (1-20, Mneme's
search answers at most 20) can be given per call too (``invoke(query, k=3)``);
``filters`` and ``speaker`` are the search API's. The key and URL come from ``api_key`` /
``base_url`` or ``MNEME_API_KEY`` / ``MNEME_URL``; what comes back passes Mneme's
readability rule for that key.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import Field, PrivateAttr

from mneme_client._async import AsyncMneme
from mneme_client._sync import Mneme
from mneme_client._tools import MAX_RESULTS, MIN_RESULTS
from mneme_client._types import Hit


def document(hit: Hit) -> Document:
    metadata = {k: v for k, v in hit.raw.items() if k != "content"}
    metadata.update(id=hit.id, kind=hit.kind, similarity=hit.similarity)
    return Document(page_content=hit.content, metadata=metadata, id=hit.id)


class MnemeRetriever(BaseRetriever):
    """The best ``k`` memories of ``store`` for a query, by Mneme's search."""

    store: str = "default"
    k: int = Field(default=5, ge=1, le=MAX_RESULTS)
    api_key: str | None = None
    base_url: str | None = None
    filters: dict[str, Any] | None = None
    speaker: str | None = None
    _client: Mneme | None = PrivateAttr(default=None)
    _aclient: AsyncMneme | None = PrivateAttr(default=None)

    def _options(self, kwargs: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        k = int(kwargs.get("k", self.k))
        if not 1 <= k <= MAX_RESULTS:
            raise ValueError(f"k must be 1-{MAX_RESULTS} (Mneme's search answers at most 20)")
        options: dict[str, Any] = {}
        if self.filters is not None:
            options["filters"] = self.filters
        if self.speaker is not None:
            options["speaker"] = self.speaker
        return k, options

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k, options = self._options(kwargs)
        if self._client is None:
            self._client = Mneme(self.api_key, self.base_url)
        hits = self._client.search(self.store, query, max(MIN_RESULTS, k), **options)
        return [document(h) for h in hits[:k]]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k, options = self._options(kwargs)
        if self._aclient is None:
            self._aclient = AsyncMneme(self.api_key, self.base_url)
        hits = await self._aclient.search(self.store, query, max(MIN_RESULTS, k), **options)
        return [document(h) for h in hits[:k]]
