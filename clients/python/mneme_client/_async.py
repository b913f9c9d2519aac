"""``AsyncMneme``: the same methods as ``Mneme``, as coroutines; listings are async
iterators. Requests are built and answers read by the same code as ``Mneme``'s."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar, Unpack

import httpx

from mneme_client import _memories, _search, _speakers, _stores
from mneme_client._call import Call, Item, Page, unseen
from mneme_client._client import Base, reaching
from mneme_client._fields import BrowseFilters, MemoryFields, MemoryUpdate, SearchOptions
from mneme_client._types import Hit, Memory, SearchResult, Store, StoreMemory, Version

T = TypeVar("T")


class _Transport(Base[httpx.AsyncClient]):
    async def send(self, call: Call[T]) -> T:
        request = self._request(call)
        attempt = 0
        while True:
            with reaching(self.base_url, self.timeout):
                response = await self.http.send(request)
            wait = self._wait(response, attempt)
            if wait is None:
                return self._result(call, response)
            await response.aclose()
            await asyncio.sleep(wait)
            attempt += 1

    async def iterate(self, call: Call[Page[Item]]) -> AsyncIterator[Item]:
        seen: set[str] = set()
        next_call: Call[Page[Item]] | None = call
        while next_call is not None:
            page = await self.send(next_call)
            for item in unseen(page.items, seen):
                yield item
            next_call = page.next


class AsyncStores:
    """``Stores``, awaited (``client.stores``)."""

    def __init__(self, transport: _Transport) -> None:
        self._t = transport

    async def create(
        self,
        name: str,
        description: str | None = None,
        *,
        metadata: Mapping[str, str] | None = None,
        strip_temporal: bool | None = None,
    ) -> Store:
        return await self._t.send(_stores.create(name, description, metadata, strip_temporal))

    async def list(self) -> list[Store]:
        return [s async for s in self._t.iterate(_stores.list_page())]

    async def get(self, store_id: str) -> Store:
        return await self._t.send(_stores.get(store_id))

    async def delete(self, store_id: str, force: bool = False) -> None:
        await self._t.send(_stores.delete(store_id, force))

    async def write(
        self, store_id: str, path: str, content: str, *, metadata: Mapping[str, str] | None = None
    ) -> StoreMemory:
        return await self._t.send(_stores.write(store_id, path, content, metadata))

    async def read(self, store_id: str, memory_id: str) -> StoreMemory:
        return await self._t.send(_stores.read(store_id, memory_id))

    async def update(
        self,
        store_id: str,
        memory_id: str,
        content: str | None = None,
        path: str | None = None,
        content_sha256: str | None = None,
        *,
        metadata: Mapping[str, str] | None = None,
    ) -> StoreMemory:
        change = _stores.update(store_id, memory_id, content, path, content_sha256, metadata)
        return await self._t.send(change)

    def list_memories(
        self, store_id: str, path_prefix: str | None = None, *, limit: int | None = None
    ) -> AsyncIterator[StoreMemory]:
        return self._t.iterate(_stores.list_memories(store_id, path_prefix, limit))


class AsyncSpeakers:
    """``Speakers``, awaited (``client.speakers``)."""

    def __init__(self, transport: _Transport) -> None:
        self._t = transport

    async def list(self, store: str = "default") -> list[str]:
        return await self._t.send(_speakers.list_(store))

    async def add(self, name: str, store: str = "default") -> str:
        return await self._t.send(_speakers.add(store, name))

    async def delete(self, name: str, store: str = "default") -> None:
        await self._t.send(_speakers.remove(store, name))


class AsyncMneme:
    """``Mneme``, awaited: ``async with AsyncMneme() as client: await client.add(...)``.
    ``http_client``: your own ``httpx.AsyncClient``; ``close()`` leaves it open."""

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
        *,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._t = _Transport(
            api_key, base_url, timeout, max_retries, http_client, httpx.AsyncClient
        )
        self.stores = AsyncStores(self._t)
        self.speakers = AsyncSpeakers(self._t)

    async def close(self) -> None:
        if self._t.own:
            await self._t.http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def add(self, text: str, **fields: Unpack[MemoryFields]) -> Memory:
        return await self._t.send(_memories.add(text, fields))

    async def add_many(self, items: Sequence[Mapping[str, Any]]) -> list[Memory]:
        return await self._t.send(_memories.add_many(items))

    async def get(self, id: str) -> Memory:
        return await self._t.send(_memories.get(id))

    async def update(self, id: str, **fields: Unpack[MemoryUpdate]) -> Memory:
        return await self._t.send(_memories.update(id, fields))

    async def delete(self, id: str, purge: bool = False) -> None:
        await self._t.send(_memories.delete(id, purge))

    async def versions(self, id: str) -> list[Version]:
        return [v async for v in self._t.iterate(_memories.versions(id))]

    def browse(
        self, limit: int | None = None, **filters: Unpack[BrowseFilters]
    ) -> AsyncIterator[Memory]:
        return self._t.iterate(_memories.browse(limit, filters))

    async def search(
        self, user_id: str, query: str, max_results: int | None = None,
        **options: Unpack[SearchOptions],
    ) -> list[Hit]:  # fmt: skip
        return await self._t.send(_search.one_list(user_id, query, max_results, options))

    async def search_full(
        self, user_id: str, query: str, max_results: int | None = None,
        **options: Unpack[SearchOptions],
    ) -> SearchResult:  # fmt: skip
        return await self._t.send(_search.full(user_id, query, max_results, options))

    async def search_self(
        self, user_id: str, query: str, max_results: int | None = None,
        **options: Unpack[SearchOptions],
    ) -> list[Hit]:  # fmt: skip
        return await self._t.send(_search.own_words(user_id, query, max_results, options))
