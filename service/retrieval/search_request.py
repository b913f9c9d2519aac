"""A search, checked: what the search face (``service.faces.search.request``) and the MCP
door's ``recall`` hand the search engine (``service.retrieval.engine``)."""

from __future__ import annotations

from dataclasses import dataclass

from service.queries.search import SearchFilters


@dataclass
class SearchRequest:
    store_ref: str
    query: str
    max_results: int
    speaker: str | None
    filters: SearchFilters
    form: str | None
    tz: int
    max_images: int
    verify: int
    cache_ttl: str | None  # cache_control's ttl: "5m" | "1h"
    warnings: list[str]
