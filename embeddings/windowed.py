"""What every embedder here shares: batching, query encoding, token windows and counts.

``SentenceTransformerEmbedder`` (torch, or its ONNX twin) and ``ExportedEmbedder`` (the
ONNX files alone, no torch) differ only in how the model is loaded and how a text is
tokenized; both embed through ``_onnx`` when it is there.

Texts longer than the model's window are split into overlapping token windows
(``chunk_many``); each window gets its own vector, so a long core-memory file stays
findable by what is in its middle.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from embeddings import Chunk, Vectors
from embeddings.onnx import OnnxTransformer


class WindowedEmbedder:
    """An ``Embedder`` of a model with a token window; subclasses load the model."""

    backend: str
    query_backend: str
    device: str

    def __init__(self, name: str, dimension: int, max_tokens: int, batch_size: int) -> None:
        self.name = name
        self.dimension = dimension
        self.max_tokens = max_tokens
        # Room for [CLS]/[SEP] and a speaker's name in front; windows overlap so a sentence
        # cut at one window's border is whole in the next.
        self.window_tokens = self.max_tokens - 2 - 16
        self.stride_tokens = max(1, self.window_tokens * 3 // 4)
        self.batch_size = batch_size
        # One caller at a time: Hugging Face fast tokenizers are not safe to share
        # between threads ("Already borrowed"), and the worker and the query encoder
        # both call in from worker threads. On CPU, parallel calls would not be faster.
        self._lock = threading.Lock()
        # Billing counts tokens apart, so a count never waits for a batch being encoded
        # (it takes well under a millisecond: callers need no thread).
        self._count_lock = threading.Lock()
        self._onnx: OnnxTransformer | None = None
        # Queries' own int8 session and lock (query_int8): a query never waits for a batch.
        self._queries: OnnxTransformer | None = None
        self._query_lock = threading.Lock()

    def _encode_without_onnx(self, texts: list[str]) -> Vectors:
        raise NotImplementedError("this embedder runs only on ONNX")

    def _offsets(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        """Each text's tokens as character offsets, without special tokens or truncation
        (called under ``_lock``)."""
        raise NotImplementedError

    def _counts(self, texts: list[str]) -> list[int]:
        """Each text's number of tokens, without special tokens (under ``_count_lock``)."""
        raise NotImplementedError

    def _encode(self, texts: Sequence[str]) -> Vectors:
        """Encode in length-sorted mini-batches, taking the model for one at a time.

        Sorting the whole call by length keeps padding low (what ``encode()`` does
        internally); locking per mini-batch rather than per call lets a search's query
        slip in between two batches of a long worker claim instead of waiting for all of it.
        """
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            batch = [texts[i] for i in chunk]
            with self._lock:
                if self._onnx is not None:
                    vectors = self._onnx.encode(batch)
                else:
                    vectors = self._encode_without_onnx(batch)
            out[chunk] = vectors
        return out

    def encode_queries(self, texts: Sequence[str]) -> Vectors:
        if self._queries is None:
            return self._encode(texts)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            with self._query_lock:
                out[i] = self._queries.encode([text])[0]
        return out

    def encode_queries_counted(self, texts: Sequence[str]) -> tuple[Vectors, list[int]]:
        if self._queries is None:
            return self.encode_queries(texts), self.count_tokens_many(texts)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        counts = []
        for i, text in enumerate(texts):
            with self._query_lock:
                counted = self._queries.encode_counted(text)
            if counted is None:
                out[i], count = self.encode_queries([text])[0], self.count_tokens(text)
            else:
                out[i], count = counted[0][0], counted[1]
            counts.append(count)
        return out, counts

    def encode_documents(self, texts: Sequence[str]) -> Vectors:
        return self._encode(texts)

    def chunk_many(self, texts: Sequence[str]) -> list[list[Chunk]]:
        """Token windows covering each text; one window when it fits the model.

        A WordPiece token covers at least one character, so a text of at most
        ``window_tokens`` characters fits without being tokenized; the rest are
        tokenized in one batched call.
        """
        out: list[list[Chunk]] = [[Chunk(0, len(t))] for t in texts]
        long = [i for i, t in enumerate(texts) if len(t) > self.window_tokens]
        if long:
            with self._lock:
                offsets = self._offsets([texts[i] for i in long])
            for i, text_offsets in zip(long, offsets, strict=True):
                out[i] = self._windows(texts[i], text_offsets)
        return out

    def _windows(self, text: str, offsets: list[tuple[int, int]]) -> list[Chunk]:
        if len(offsets) <= self.window_tokens:
            return [Chunk(0, len(text))]
        chunks = []
        for first in range(0, len(offsets), self.stride_tokens):
            last = min(first + self.window_tokens, len(offsets)) - 1
            chunks.append(Chunk(offsets[first][0], offsets[last][1]))
            if last == len(offsets) - 1:
                break
        return chunks

    def count_tokens_many(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        with self._count_lock:
            return self._counts(list(texts))

    def count_tokens(self, text: str) -> int:
        return self.count_tokens_many([text])[0]
