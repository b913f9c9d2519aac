"""The Memory Store face: ``/api/v1/forward/memory_stores`` (seed 003)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mneme_client._call import Call, Page, done, seg
from mneme_client._types import Json, Store, StoreMemory

BASE = "/api/v1/forward/memory_stores"
STORES_PAGE = 100


def _memories(store_id: str) -> str:
    return f"{BASE}/{seg(store_id)}/memories"


def create(
    name: str,
    description: str | None,
    metadata: Mapping[str, str] | None = None,
    strip_temporal: bool | None = None,
) -> Call[Store]:
    given = {"description": description, "metadata": metadata, "strip_temporal": strip_temporal}
    body = {"name": name, **{k: v for k, v in given.items() if v is not None}}
    return Call("POST", BASE, Store.from_json, json=body, write=True)


def list_page(after_id: str | None = None) -> Call[Page[Store]]:
    def parse(body: Json) -> Page[Store]:
        nxt = list_page(body["last_id"]) if body["has_more"] and body["last_id"] else None
        return Page([Store.from_json(s) for s in body["data"]], nxt)

    params = {"limit": str(STORES_PAGE)} | ({"after_id": after_id} if after_id else {})
    return Call("GET", BASE, parse, params=params)


def get(store_id: str) -> Call[Store]:
    return Call("GET", f"{BASE}/{seg(store_id)}", Store.from_json)


def delete(store_id: str, force: bool) -> Call[None]:
    params = {"force": "true"} if force else None
    return Call("DELETE", f"{BASE}/{seg(store_id)}", done, params=params, write=True)


def write(
    store_id: str, path: str, content: str, metadata: Mapping[str, str] | None = None
) -> Call[StoreMemory]:
    body: dict[str, Any] = {"path": path, "content": content}
    if metadata is not None:
        body["metadata"] = dict(metadata)
    return Call("POST", _memories(store_id), StoreMemory.from_json, json=body, write=True)


def read(store_id: str, memory_id: str) -> Call[StoreMemory]:
    return Call("GET", f"{_memories(store_id)}/{seg(memory_id)}", StoreMemory.from_json)


def update(
    store_id: str,
    memory_id: str,
    content: str | None,
    path: str | None,
    content_sha256: str | None,
    metadata: Mapping[str, str] | None = None,
) -> Call[StoreMemory]:
    fields = {"content": content, "path": path, "content_sha256": content_sha256,
              "metadata": None if metadata is None else dict(metadata)}  # fmt: skip
    body = {k: v for k, v in fields.items() if v is not None}
    path_ = f"{_memories(store_id)}/{seg(memory_id)}"
    return Call("POST", path_, StoreMemory.from_json, json=body, write=True)


def list_memories(
    store_id: str, path_prefix: str | None, limit: int | None, after_id: str | None = None
) -> Call[Page[StoreMemory]]:
    """A page of a store's path memories, by path; items carry no content."""

    def parse(body: Json) -> Page[StoreMemory]:
        more = body["has_more"] and body["last_id"]
        nxt = list_memories(store_id, path_prefix, limit, body["last_id"]) if more else None
        return Page([StoreMemory.from_json(m) for m in body["data"]], nxt)

    given = {"path_prefix": path_prefix, "limit": limit, "after_id": after_id}
    params = {k: str(v) for k, v in given.items() if v is not None}
    return Call("GET", _memories(store_id), parse, params=params)
