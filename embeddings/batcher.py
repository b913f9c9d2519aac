"""Query vectors for search: off the event loop, micro-batched, cached.

Concurrent requests share model calls: while one batch is being encoded in a worker
thread, new queries queue up, and the next call takes all of them at once (up to
``max_batch``). No request waits for a timer. Identical queries in flight share one
future, and a small LRU cache answers repeated queries without the model. The same
thread counts each query's tokens (for billing), so the event loop does not.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt

from embeddings import Embedder

Vector = npt.NDArray[np.float32]


class QueryEncoder:
    def __init__(self, embedder: Embedder, *, max_batch: int = 32, cache_size: int = 1024) -> None:
        self.embedder = embedder
        self.max_batch = max_batch
        self.cache_size = cache_size
        self._cache: OrderedDict[str, tuple[Vector, int]] = OrderedDict()
        self._waiting: dict[str, asyncio.Future[Vector]] = {}
        self._queue: list[str] = []
        self._drainer: asyncio.Task[None] | None = None
        # One long-lived thread: torch keeps per-thread kernel caches warm.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mneme-query")
        self.model_calls = 0
        self.cache_hits = 0

    async def encode(self, text: str) -> Vector:
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            self.cache_hits += 1
            return cached[0]
        future = self._waiting.get(text)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._waiting[text] = future
            self._queue.append(text)
            if self._drainer is None or self._drainer.done():
                self._drainer = asyncio.create_task(self._drain(), name="mneme-query-encoder")
        return await asyncio.shield(future)

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
            try:
                self.model_calls += 1
                loop = asyncio.get_running_loop()
                vectors, counts = await loop.run_in_executor(
                    self._thread, self._encode_and_count, batch
                )
            except Exception as exc:  # every waiter sees the failure
                for text in batch:
                    future = self._waiting.pop(text)
                    if not future.done():
                        future.set_exception(exc)
                continue
            for text, vector, count in zip(batch, vectors, counts, strict=True):
                self._remember(text, vector, count)
                future = self._waiting.pop(text)
                if not future.done():
                    future.set_result(vector)

    def tokens(self, text: str) -> int | None:
        """The query's token count, if it was encoded here and is still cached."""
        cached = self._cache.get(text)
        return None if cached is None else cached[1]

    def _encode_and_count(self, batch: list[str]) -> tuple[Vector, list[int]]:
        return self.embedder.encode_queries_counted(batch)

    def _remember(self, text: str, vector: Vector, count: int) -> None:
        if self.cache_size <= 0:
            return
        self._cache[text] = (vector, count)
        self._cache.move_to_end(text)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
