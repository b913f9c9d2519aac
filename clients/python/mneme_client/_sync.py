"""``Mneme``: the blocking client."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar, Unpack

import httpx

from mneme_client import _memories, _search, _speakers, _stores
from mneme_client._call import Call, Item, Page, unseen
from mneme_client._client import Base, reaching
from mneme_client._fields import BrowseFilters, MemoryFields, MemoryUpdate, SearchOptions
from mneme_client._types import Hit, Memory, SearchResult, Store, StoreMemory, Version

T = TypeVar("T")


class _Transport(Base[httpx.Client]):
    def send(self, call: Call[T]) -> T:
        request = self._request(call)
        attempt = 0
        while True:
            with reaching(self.base_url, self.timeout):
                response = self.http.send(request)
            wait = self._wait(response, attempt)
            if wait is None:
                return self._result(call, response)
            response.close()
            time.sleep(wait)
            attempt += 1

    def iterate(self, call: Call[Page[Item]]) -> Iterator[Item]:
        seen: set[str] = set()
        next_call: Call[Page[Item]] | None = call
        while next_call is not None:
            page = self.send(next_call)
            yield from unseen(page.items, seen)
            next_call = page.next


class Stores:
    """Memory stores and their path-addressed memories (``client.stores``)."""

    def __init__(self, transport: _Transport) -> None:
        self._t = transport

    def create(
        self,
        name: str,
        description: str | None = None,
        *,
        metadata: Mapping[str, str] | None = None,
        strip_temporal: bool | None = None,
    ) -> Store:
        """Create a store (needs an admin key); 409 if the name is taken.
        ``strip_temporal``: its searches leave out ``created_at`` and ``time_bucket``."""
        return self._t.send(_stores.create(name, description, metadata, strip_temporal))

    def list(self) -> list[Store]:
        """Every store of the workspace."""
        return [*self._t.iterate(_stores.list_page())]

    def get(self, store_id: str) -> Store:
        """A store by its ``memstore_…`` id or its name."""
        return self._t.send(_stores.get(store_id))

    def delete(self, store_id: str, force: bool = False) -> None:
        """Delete a store; one holding active memories needs ``force=True``."""
        self._t.send(_stores.delete(store_id, force))

    def write(
        self, store_id: str, path: str, content: str, *, metadata: Mapping[str, str] | None = None
    ) -> StoreMemory:
        """Write a memory at a path (409 if an active memory holds it); ``metadata``: up
        to 16 string keys and values."""
        return self._t.send(_stores.write(store_id, path, content, metadata))

    def read(self, store_id: str, memory_id: str) -> StoreMemory:
        """A path memory, with its content."""
        return self._t.send(_stores.read(store_id, memory_id))

    def update(
        self,
        store_id: str,
        memory_id: str,
        content: str | None = None,
        path: str | None = None,
        content_sha256: str | None = None,
        *,
        metadata: Mapping[str, str] | None = None,
    ) -> StoreMemory:
        """Change a path memory's content and/or metadata. With ``content_sha256``, only
        if the stored content still has that hash (``ConflictError`` otherwise). A path
        never changes."""
        change = _stores.update(store_id, memory_id, content, path, content_sha256, metadata)
        return self._t.send(change)

    def list_memories(
        self, store_id: str, path_prefix: str | None = None, *, limit: int | None = None
    ) -> Iterator[StoreMemory]:
        """Every path memory of the store (by path, without content), page by page of
        ``limit`` (1-100, default 20)."""
        return self._t.iterate(_stores.list_memories(store_id, path_prefix, limit))


class Speakers:
    """A store's registered speakers (``client.speakers``): a memory's or a search's
    ``speaker`` must be one of them, or ``me`` (the agent itself, always there)."""

    def __init__(self, transport: _Transport) -> None:
        self._t = transport

    def list(self, store: str = "default") -> list[str]:
        """The store's speakers' names, ``me`` among them."""
        return self._t.send(_speakers.list_(store))

    def add(self, name: str, store: str = "default") -> str:
        """Register a speaker (``ConflictError`` if registered already)."""
        return self._t.send(_speakers.add(store, name))

    def delete(self, name: str, store: str = "default") -> None:
        """Unregister a speaker (``me`` cannot be: ``ConflictError``)."""
        self._t.send(_speakers.remove(store, name))


class Mneme:
    """A blocking client. ``api_key`` and ``base_url`` default to ``MNEME_API_KEY`` and
    ``MNEME_URL`` (else ``http://127.0.0.1:8080``). 429 and 503 answers are retried up to
    ``max_retries`` times, after ``Retry-After``. ``http_client``: your own
    ``httpx.Client`` (proxies, transports); it is not closed by ``close()``."""

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
        *,
        http_client: httpx.Client | None = None,
    ) -> None:
        self._t = _Transport(api_key, base_url, timeout, max_retries, http_client, httpx.Client)
        self.stores = Stores(self._t)
        self.speakers = Speakers(self._t)

    def close(self) -> None:
        if self._t.own:
            self._t.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def add(self, text: str, **fields: Unpack[MemoryFields]) -> Memory:
        """Write a memory (``store`` defaults to ``default``)."""
        return self._t.send(_memories.add(text, fields))

    def add_many(self, items: Sequence[Mapping[str, Any]]) -> list[Memory]:
        """Write 1 to 500 memories (dicts of ``text`` and fields) at once, all or nothing."""
        return self._t.send(_memories.add_many(items))

    def get(self, id: str) -> Memory:
        """A memory, with its ``embedding_status``."""
        return self._t.send(_memories.get(id))

    def update(self, id: str, **fields: Unpack[MemoryUpdate]) -> Memory:
        """Change a memory's text or fields."""
        return self._t.send(_memories.update(id, fields))

    def delete(self, id: str, purge: bool = False) -> None:
        """Tombstone a memory; ``purge=True`` (admin) erases it and its versions."""
        self._t.send(_memories.delete(id, purge))

    def versions(self, id: str) -> list[Version]:
        """A memory's audit trail, newest first."""
        return list(self._t.iterate(_memories.versions(id)))

    def browse(
        self, limit: int | None = None, **filters: Unpack[BrowseFilters]
    ) -> Iterator[Memory]:
        """Every memory the filters let through, newest first per window, page by page
        of ``limit`` scanned memories (default 25, at most 100)."""
        return self._t.iterate(_memories.browse(limit, filters))

    def search(
        self,
        user_id: str,
        query: str,
        max_results: int | None = None,
        **options: Unpack[SearchOptions],
    ) -> list[Hit]:
        """Search store ``user_id``: memories, then the agent's own words, then images."""
        return self._t.send(_search.one_list(user_id, query, max_results, options))

    def search_full(
        self,
        user_id: str,
        query: str,
        max_results: int | None = None,
        **options: Unpack[SearchOptions],
    ) -> SearchResult:
        """Search, keeping memories, own words, images and ``verify_used`` apart."""
        return self._t.send(_search.full(user_id, query, max_results, options))

    def search_self(
        self,
        user_id: str,
        query: str,
        max_results: int | None = None,
        **options: Unpack[SearchOptions],
    ) -> list[Hit]:
        """Search only the agent's own words (speaker ``me``)."""
        return self._t.send(_search.own_words(user_id, query, max_results, options))
