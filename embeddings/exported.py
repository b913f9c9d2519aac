"""The embedding model as exported files: ONNX Runtime and a tokenizer, no torch.

What the slim image runs (Dockerfile): its builder stage loads the model with
sentence-transformers, exports it (``embeddings.onnx``) and writes, beside the ONNX files
in ``MNEME_ONNX_DIR``, the model's tokenizer (``<name>.tokenizer.json``, Hugging Face's
``tokenizers`` format) and a manifest (``MANIFEST``): the model's name, dimension and
window, which files to run, and the torch model's own vectors for ``PROBES``. The
runtime stage has onnxruntime and tokenizers but no torch; ``ExportedEmbedder`` loads the
files, checks the export against those vectors (as ``embeddings.onnx.load`` checks it
against torch) and embeds exactly as ``SentenceTransformerEmbedder`` on ONNX does: the
same tokenizer, the same ONNX files, the same pooling (``embeddings.onnx.OnnxTransformer``).

    python -m embeddings.exported /opt/mneme/onnx   # write the manifest (needs torch)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from embeddings.onnx import AGREEMENT, AGREEMENT_INT8, PROBES, OnnxTransformer
from embeddings.windowed import WindowedEmbedder

MANIFEST = "export.json"


class NoExport(RuntimeError):
    """No exported model where one was needed, or one that does not fit the request."""


def write(directory: Path) -> Path:
    """Export the bundled model into ``directory`` (ONNX, int8 twin, tokenizer, manifest)."""
    from embeddings.model import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder(onnx_dir=directory, query_int8=True, backend="onnx")
    documents, queries = embedder.exported_files()
    tokenizer = f"{embedder.name}.tokenizer.json"
    backend, pad_id = embedder.backend_tokenizer()
    backend.save(str(directory / tokenizer))
    expected = embedder.torch_vectors(PROBES)
    manifest = {
        "name": embedder.name,
        "dimension": embedder.dimension,
        "max_tokens": embedder.max_tokens,
        "onnx": documents.name,
        "onnx_int8": queries.name,
        "tokenizer": tokenizer,
        "pad_id": pad_id,
        "probes": PROBES,
        "probe_vectors": expected.round(7).tolist(),
    }
    path = directory / MANIFEST
    path.write_text(json.dumps(manifest) + "\n")
    return path


def _threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class ExportedEmbedder(WindowedEmbedder):
    """An ``Embedder`` from ``write``'s files: ONNX Runtime only."""

    def __init__(
        self,
        directory: Path,
        batch_size: int = 64,
        *,
        backend: str = "auto",
        query_int8: bool = False,
    ) -> None:
        from tokenizers import Tokenizer

        path = directory / MANIFEST
        if not path.is_file():
            raise NoExport(
                f"no exported embedding model in {directory} ({MANIFEST}): this install has no "
                "torch to run the model itself; point MNEME_ONNX_DIR at an export "
                "(python -m embeddings.exported DIR, where torch is installed)"
            )
        if backend == "torch":
            raise NoExport("MNEME_EMBEDDING_BACKEND=torch needs torch, which this install lacks")
        manifest: dict[str, Any] = json.loads(path.read_text())
        tokenizer = Tokenizer.from_file(str(directory / manifest["tokenizer"]))
        int8 = backend == "onnx-int8"
        documents = directory / manifest["onnx_int8" if int8 else "onnx"]
        super().__init__(
            manifest["name"], manifest["dimension"], manifest["max_tokens"], batch_size
        )
        self.device = "cpu"
        # Windows and counts: every token, no special ones (OnnxTransformer has its own).
        self._tokenizer = Tokenizer.from_str(tokenizer.to_str())
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        pad_id = manifest["pad_id"]
        self._onnx = OnnxTransformer(documents, tokenizer, self.max_tokens, _threads(), pad_id)
        self.backend = "onnx-int8" if int8 else "onnx"
        expected = np.asarray(manifest["probe_vectors"], dtype=np.float32)
        self._check(self._onnx, manifest["probes"], expected, AGREEMENT_INT8 if int8 else AGREEMENT)
        if query_int8:
            queries = directory / manifest["onnx_int8"]
            self._queries = OnnxTransformer(queries, tokenizer, self.max_tokens, 1, pad_id)
            self._check(self._queries, manifest["probes"], expected, AGREEMENT_INT8)
            self.query_backend = "onnx-int8, one at a time"
        else:
            self.query_backend = self.backend

    @staticmethod
    def _check(twin: OnnxTransformer, probes: list[str], expected: Any, floor: float) -> None:
        agreement = float((twin.encode(probes) * expected).sum(axis=1).min())
        if agreement < floor:
            raise NoExport(
                f"{twin.path.name} disagrees with the model it was exported from "
                f"(min cosine {agreement:.5f} < {floor})"
            )

    def _offsets(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        return [e.offsets for e in self._tokenizer.encode_batch(texts, add_special_tokens=False)]

    def _counts(self, texts: list[str]) -> list[int]:
        encoded = self._tokenizer.encode_batch(texts, add_special_tokens=False)
        return [len(e.ids) for e in encoded]


if __name__ == "__main__":
    print(write(Path(sys.argv[1])))
