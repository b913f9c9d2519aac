"""The ONNX backend: the model's own vectors (or, asked for, int8 weights that point the
same way), from an export made once and kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from embeddings import onnx
from embeddings.model import SentenceTransformerEmbedder
from service.settings import Settings, SettingsError

TEXTS = [
    "What does Alice drink in the morning?",
    "Caroline: I went to the support group yesterday.",
    "ok",
    "A long core-memory file about the deploy pipeline and its many stages. " * 40,
    "Emoji and accents: café, naïve, 😀, 日本語のテキスト",
]


def test_the_service_embeds_with_onnx_runtime_on_a_cpu(
    embedder: SentenceTransformerEmbedder,
) -> None:
    assert embedder.device == "cpu"
    assert embedder.backend == "onnx"


def test_onnx_vectors_are_the_models_own(tmp_path: Path) -> None:
    embedder = SentenceTransformerEmbedder(onnx_dir=tmp_path, backend="onnx")
    assert embedder.backend == "onnx"
    reference = SentenceTransformerEmbedder(backend="torch")
    assert reference.backend == "torch"
    # One at a time (queries) and in a padded batch (documents), long texts truncated.
    for encode, expect in (
        (embedder.encode_queries, reference.encode_queries),
        (embedder.encode_documents, reference.encode_documents),
    ):
        got, want = encode(TEXTS), expect(TEXTS)
        assert got.shape == want.shape == (len(TEXTS), 384)
        assert float((got * want).sum(axis=1).min()) >= onnx.AGREEMENT
        assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    single = embedder.encode_queries([TEXTS[0]])[0]
    assert float(single @ reference.encode_queries([TEXTS[0]])[0]) >= onnx.AGREEMENT


def test_the_export_is_made_once_and_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = SentenceTransformerEmbedder(onnx_dir=tmp_path, backend="onnx")
    (exported,) = tmp_path.glob("*.onnx")
    stamp = exported.stat().st_mtime_ns

    def no_export(*args: Any) -> None:
        raise AssertionError("exported again")

    monkeypatch.setattr(onnx, "export", no_export)
    second = SentenceTransformerEmbedder(onnx_dir=tmp_path, backend="onnx")
    assert second.backend == first.backend == "onnx"
    assert exported.stat().st_mtime_ns == stamp
    # No temporary left; the lock stays (removing it would race a process taking it).
    assert sorted(p.name for p in tmp_path.iterdir()) == [onnx.LOCK, exported.name]


def test_a_pipeline_it_does_not_cover_stays_on_torch() -> None:
    class Transformer: ...

    class Pooling:
        def __init__(self, mode: str) -> None:
            self.pooling_mode = mode

    class Normalize: ...

    class Dense: ...

    class Tokenizer:  # a fast one has a Rust half
        def __init__(self, fast: bool) -> None:
            self.backend_tokenizer = object() if fast else None

    class Model(list[object]):
        def __init__(self, *modules: object, fast: bool = True) -> None:
            super().__init__(modules)
            self.tokenizer = Tokenizer(fast)

    assert onnx.supported(Model(Transformer(), Pooling("mean"), Normalize()))
    assert onnx.supported(Model(Transformer(), Pooling("mean")))
    assert not onnx.supported(Model(Transformer(), Pooling("mean"), fast=False))
    assert not onnx.supported(Model(Transformer(), Pooling("cls"), Normalize()))
    assert not onnx.supported(Model(Transformer(), Pooling("mean"), Dense(), Normalize()))


def test_a_disagreeing_export_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnx, "AGREEMENT_INT8", 1.5)  # no export can agree this well
    with pytest.raises(RuntimeError, match="ONNX"):
        SentenceTransformerEmbedder(onnx_dir=tmp_path, backend="onnx-int8")
    monkeypatch.setattr(onnx, "AGREEMENT", 1.5)
    assert SentenceTransformerEmbedder(onnx_dir=tmp_path).backend == "torch"
    with pytest.raises(RuntimeError, match="ONNX"):
        SentenceTransformerEmbedder(onnx_dir=tmp_path, backend="onnx")


def test_int8_weights_keep_the_models_direction_and_are_made_once(tmp_path: Path) -> None:
    int8 = SentenceTransformerEmbedder(onnx_dir=tmp_path, backend="onnx-int8")
    assert int8.backend == "onnx-int8"
    assert sorted(p.name.endswith("-int8.onnx") for p in tmp_path.glob("*.onnx")) == [False, True]
    reference = SentenceTransformerEmbedder(backend="torch")
    got, want = int8.encode_documents(TEXTS), reference.encode_documents(TEXTS)
    cosines = (got * want).sum(axis=1)
    # Close, not equal: a two-letter text moves most (0.957 here); what it does to
    # retrieval is measured on LoCoMo (bench.quality_bench --backend onnx-int8).
    assert float(cosines.mean()) >= onnx.AGREEMENT_INT8 and float(cosines.min()) >= 0.95
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    again = SentenceTransformerEmbedder(onnx_dir=tmp_path, backend="onnx-int8")
    assert np.array_equal(again.encode_queries(TEXTS[:1]), int8.encode_queries(TEXTS[:1]))
    assert len(list(tmp_path.iterdir())) == 3  # both kept and the lock, nothing temporary


def test_int8_queries_go_one_at_a_time_and_leave_documents_alone(tmp_path: Path) -> None:
    embedder = SentenceTransformerEmbedder(onnx_dir=tmp_path, query_int8=True)
    assert embedder.backend == "onnx" and embedder.query_backend == "onnx-int8, one at a time"
    # A query's vector is the same whatever it is encoded with (dynamic quantization
    # would otherwise share one activation scale across the batch).
    together = embedder.encode_queries(TEXTS)
    alone = np.stack([embedder.encode_queries([t])[0] for t in reversed(TEXTS)])[::-1]
    assert np.array_equal(together, alone)
    fp32 = SentenceTransformerEmbedder(onnx_dir=tmp_path)
    assert fp32.query_backend == "onnx"
    assert np.array_equal(embedder.encode_documents(TEXTS), fp32.encode_documents(TEXTS))
    cosines = (together * fp32.encode_queries(TEXTS)).sum(axis=1)
    assert float(cosines.mean()) >= onnx.AGREEMENT_INT8 and float(cosines.min()) >= 0.95
    assert not np.array_equal(together, fp32.encode_queries(TEXTS))  # int8, really
    # Without ONNX there is no int8 twin: queries stay on torch.
    assert SentenceTransformerEmbedder(query_int8=True).query_backend == "torch"


def test_backend_settings() -> None:
    settings = Settings.from_env({"MNEME_EMBEDDING_BACKEND": "torch", "MNEME_DATA_DIR": "/d"})
    assert settings.embedding_backend == "torch"
    int8 = Settings.from_env({"MNEME_EMBEDDING_BACKEND": "onnx-int8"})
    assert int8.embedding_backend == "onnx-int8"
    assert settings.model_cache_dir == Path("/d/onnx")
    assert Settings.from_env({"MNEME_ONNX_DIR": "/o"}).model_cache_dir == Path("/o")
    with pytest.raises(SettingsError, match="MNEME_EMBEDDING_BACKEND"):
        Settings.from_env({"MNEME_EMBEDDING_BACKEND": "tpu"})
    assert Settings.from_env({}).query_int8
    assert not Settings.from_env({"MNEME_QUERY_INT8": "false"}).query_int8
    with pytest.raises(SettingsError, match="MNEME_QUERY_INT8"):
        Settings.from_env({"MNEME_QUERY_INT8": "sometimes"})


def test_a_query_is_tokenized_once_for_its_vector_and_its_count(
    embedder: SentenceTransformerEmbedder,
) -> None:
    # The search's query path (one pass of the Rust tokenizer) gives the vector and the
    # billed token count the two separate calls give, to the bit; a text too long for the
    # model (TEXTS[3]) takes the truncating path and is counted whole.
    assert embedder.query_backend == "onnx-int8, one at a time"
    assert embedder._queries is not None
    assert embedder._queries.encode_counted(TEXTS[3]) is None
    assert embedder._queries.encode_counted(TEXTS[0]) is not None
    vectors, counts = embedder.encode_queries_counted(TEXTS)
    assert np.array_equal(vectors, embedder.encode_queries(TEXTS))
    assert counts == embedder.count_tokens_many(TEXTS)
    assert counts[3] > embedder._queries.max_tokens
