"""The write API and browse: ``/api/v1/memories``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mneme_client._call import Call, Page, done, seg
from mneme_client._fields import BrowseFilters, MemoryFields, MemoryUpdate, query, wire
from mneme_client._types import Json, Memory, Version

BASE = "/api/v1/memories"


def add(text: str, fields: MemoryFields) -> Call[Memory]:
    return Call("POST", BASE, Memory.from_json, json={"text": text, **wire(fields)}, write=True)


def add_many(items: Sequence[Mapping[str, Any]]) -> Call[list[Memory]]:
    def parse(body: Json) -> list[Memory]:
        return [Memory.from_json(m) for m in body["memories"]]

    return Call("POST", BASE, parse, json={"memories": [wire(i) for i in items]}, write=True)


def get(memory_id: str) -> Call[Memory]:
    return Call("GET", f"{BASE}/{seg(memory_id)}", Memory.from_json)


def update(memory_id: str, fields: MemoryUpdate) -> Call[Memory]:
    return Call(
        "PATCH", f"{BASE}/{seg(memory_id)}", Memory.from_json, json=wire(fields), write=True
    )


def delete(memory_id: str, purge: bool) -> Call[None]:
    params = {"purge": "true"} if purge else None
    return Call("DELETE", f"{BASE}/{seg(memory_id)}", done, params=params, write=True)


def versions(memory_id: str, cursor: str | None = None) -> Call[Page[Version]]:
    """A page of a memory's versions, newest first (the service answers 100 at most a
    page); the next by ``next_cursor``."""

    def parse(body: Json) -> Page[Version]:
        more = body.get("has_more") and body.get("next_cursor")
        return Page(
            [Version.from_json(v) for v in body["data"]],
            versions(memory_id, body["next_cursor"]) if more else None,
        )

    params = {"limit": "100", **({"cursor": cursor} if cursor else {})}
    return Call("GET", f"{BASE}/{seg(memory_id)}/versions", parse, params=params)


def browse(
    limit: int | None, filters: BrowseFilters, cursor: str | None = None
) -> Call[Page[Memory]]:
    """A page of browse. A page may hold fewer than ``limit`` memories (filters apply to
    the scanned window) while more follow: paging goes by ``hasMore`` and ``cursor``."""

    def parse(body: Json) -> Page[Memory]:
        more = body.get("hasMore") and body.get("cursor")
        return Page(
            [Memory.from_json(m) for m in body["data"]],
            browse(limit, filters, body["cursor"]) if more else None,
        )

    return Call("GET", BASE, parse, params=query({**filters, "limit": limit, "cursor": cursor}))
