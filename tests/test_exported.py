"""The exported model (the slim image's): ONNX Runtime and a tokenizer file, no torch,
and exactly what the model embeds on ONNX (embeddings.exported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from embeddings import exported, onnx
from embeddings.exported import ExportedEmbedder, NoExport
from embeddings.model import SentenceTransformerEmbedder
from service.ops.embedding import load_embedder
from service.settings import Settings
from tests.test_onnx import TEXTS

ROOT = Path(__file__).resolve().parents[1]
# Imports fail for these in the child: what an install without torch looks like.
WITHOUT_TORCH = (
    "import sys\nfrom pathlib import Path\n"
    "for m in ('torch', 'sentence_transformers', 'transformers'):\n    sys.modules[m] = None\n"
)


def without_torch(script: str) -> str:
    """What ``script`` prints, run where torch and its kin cannot be imported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH + script],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("export")
    exported.write(directory)
    return directory


def test_the_export_embeds_as_the_model_does(export_dir: Path) -> None:
    model = SentenceTransformerEmbedder(onnx_dir=export_dir, query_int8=True)
    slim = ExportedEmbedder(export_dir, query_int8=True)
    assert (slim.name, slim.dimension, slim.max_tokens) == (model.name, 384, model.max_tokens)
    assert (slim.backend, slim.query_backend) == (model.backend, model.query_backend)
    documents = slim.encode_documents(TEXTS)
    assert np.array_equal(documents, model.encode_documents(TEXTS))  # the same ONNX run
    torch = model.torch_vectors(TEXTS)
    assert float((documents * torch).sum(axis=1).min()) >= onnx.AGREEMENT
    assert np.array_equal(slim.encode_queries(TEXTS), model.encode_queries(TEXTS))
    vectors, counts = slim.encode_queries_counted(TEXTS)
    expected_vectors, expected_counts = model.encode_queries_counted(TEXTS)
    assert np.array_equal(vectors, expected_vectors) and counts == expected_counts
    assert slim.count_tokens_many(TEXTS) == model.count_tokens_many(TEXTS)
    assert slim.chunk_many(TEXTS) == model.chunk_many(TEXTS)
    assert len(slim.chunk_many(TEXTS)[3]) > 1  # the long text is windowed alike


def test_the_int8_backend_from_the_export(export_dir: Path) -> None:
    model = SentenceTransformerEmbedder(onnx_dir=export_dir, backend="onnx-int8")
    slim = ExportedEmbedder(export_dir, backend="onnx-int8")
    assert slim.backend == "onnx-int8"
    assert np.array_equal(slim.encode_documents(TEXTS), model.encode_documents(TEXTS))


def test_an_export_that_disagrees_is_refused(export_dir: Path, tmp_path: Path) -> None:
    for path in export_dir.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    manifest = json.loads((tmp_path / exported.MANIFEST).read_text())
    manifest["probe_vectors"] = (-np.asarray(manifest["probe_vectors"])).tolist()
    (tmp_path / exported.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(NoExport, match="disagrees"):
        ExportedEmbedder(tmp_path)
    with pytest.raises(NoExport, match="no exported embedding model"):
        ExportedEmbedder(tmp_path / "nothing")
    with pytest.raises(NoExport, match="torch"):
        ExportedEmbedder(export_dir, backend="torch")


def test_without_torch_the_service_loads_the_export(export_dir: Path) -> None:
    """In a process where torch, sentence-transformers and transformers cannot be imported,
    ``load_embedder`` takes the export and embeds as the model does."""
    out = without_torch(
        "import json\n"
        "from service.ops.embedding import load_embedder\n"
        "from service.settings import Settings\n"
        f"e = load_embedder(Settings(onnx_dir=Path({str(export_dir)!r})))\n"
        "print(json.dumps([type(e).__name__, e.backend, e.query_backend,"
        " e.encode_documents(['What does Alice drink?']).tolist()]))\n"
    )
    kind, backend, queries, vectors = json.loads(out.strip().splitlines()[-1])
    assert (kind, backend, queries) == ("ExportedEmbedder", "onnx", "onnx-int8, one at a time")
    model = load_embedder(Settings(onnx_dir=export_dir))
    assert np.allclose(vectors, model.encode_documents(["What does Alice drink?"]), atol=1e-6)


def test_without_torch_a_model_of_ones_own_is_refused(export_dir: Path) -> None:
    out = without_torch(
        "from service.ops.embedding import ModelMismatch, load_embedder\n"
        "from service.settings import Settings\n"
        "try:\n"
        f"    load_embedder(Settings(onnx_dir=Path({str(export_dir)!r}), embedding_model='/m'))\n"
        "except ModelMismatch as exc:\n"
        "    print(exc)\n"
    )
    assert "need torch" in out
