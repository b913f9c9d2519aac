"""``POST /api/v1/memory/search`` as seed 002's SDK methods: search, search_full,
search_self."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from mneme_client._call import Call, unseen
from mneme_client._fields import SearchOptions, filters_wire
from mneme_client._types import Hit, Json, SearchResult

PATH = "/api/v1/memory/search"
DEFAULT_MAX_RESULTS = 10  # the seed: SDKs send 10 unless told

T = TypeVar("T")


def _call(
    user_id: str,
    query: str,
    max_results: int | None,
    options: SearchOptions,
    parse: Callable[[Json], T],
) -> Call[T]:
    opts = dict(options)
    model = opts.pop("model", None)
    filters = opts.get("filters")
    if isinstance(filters, Mapping):  # a date or datetime goes as ISO 8601
        opts["filters"] = filters_wire(filters)
    count = DEFAULT_MAX_RESULTS if max_results is None else max_results
    body = {"user_id": user_id, "query": query, "max_results": count, **opts}
    headers = {"X-WOS-Model": str(model)} if model is not None else None
    return Call("POST", PATH, parse, json=body, headers=headers)


def full(
    user_id: str, query: str, max_results: int | None, options: SearchOptions
) -> Call[SearchResult]:
    return _call(user_id, query, max_results, options, SearchResult.from_json)


def merged(hits: Iterable[Hit]) -> list[Hit]:
    return list(unseen(hits, set()))


def one_list(
    user_id: str, query: str, max_results: int | None, options: SearchOptions
) -> Call[list[Hit]]:
    """Memories, then the agent's own words, then images; no id twice, no verify_used."""

    def parse(body: Json) -> list[Hit]:
        r = SearchResult.from_json(body)
        return merged([*r.memories, *r.self_memories, *r.images])

    return _call(user_id, query, max_results, options, parse)


def own_words(
    user_id: str, query: str, max_results: int | None, options: SearchOptions
) -> Call[list[Hit]]:
    """Only the agent's own words (speaker ``me``). Tablet 2 answers them in
    ``self_memories``; models that keep them in ``memories`` answer only those there."""

    def parse(body: Json) -> list[Hit]:
        r = SearchResult.from_json(body)
        return [
            dataclasses.replace(h, kind="self") for h in merged([*r.self_memories, *r.memories])
        ]

    narrowed: SearchOptions = {**options, "speaker": "me", "max_images": 0}
    return _call(user_id, query, max_results, narrowed, parse)
