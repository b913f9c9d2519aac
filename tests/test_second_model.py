"""``MNEME_EMBEDDING_MODEL`` pointed at another local model: ``mneme serve`` embeds with it
(its own vectors, its own window for chunks, the ONNX path where its pipeline allows),
answers searches with its query vectors, says when stored vectors are another model's,
and ``mneme reembed`` moves them over. A model whose vectors do not fit the schema stops
``serve`` at once with a message that says why.

The models are made here from the bundled one: the same weights with CLS pooling (a
pipeline the ONNX backend does not take: torch), with a 128-token window (mean pooling:
ONNX, with an export of its own), and with a Dense layer to 256 dimensions.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import numpy as np
import pytest

from bench.common import Server
from embeddings import document_text
from embeddings.model import DEFAULT_MODEL_NAME, SentenceTransformerEmbedder, bundled_model_path
from service.ops import db
from tests.helpers import ADMIN, BOOTSTRAP_KEY, repo_root

pytestmark = pytest.mark.slow  # pyproject.toml: markers: each test starts `mneme serve`

SHORT = "Alice drinks her coffee black, with no sugar at all."
NEEDLE = "The lighthouse keeper on Skerry Island collects antique brass telescopes."
# Long enough for several windows of either model; the needle sits in the middle.
LONG = " ".join(
    [f"Paragraph {i} of the deploy runbook: build, test, tag and ship the service." for i in
     range(40)] + [NEEDLE] +
    [f"Paragraph {i} of the on-call notes: page, triage, mitigate and write it up." for i in
     range(40, 80)]
)  # fmt: skip


def variant(into: Path, name: str, change: dict[str, dict[str, Any]]) -> Path:
    """A copy of the bundled model named ``name``, with ``change`` (file -> keys)."""
    path = into / name
    shutil.copytree(bundled_model_path(), path)
    for file, values in change.items():
        config = json.loads((path / file).read_text())
        config.update(values)
        (path / file).write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    into = tmp_path_factory.mktemp("models")
    cls = {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}
    return {
        "minilm-cls": variant(into, "minilm-cls", {"1_Pooling/config.json": cls}),
        "minilm-128": variant(into, "minilm-128", {"sentence_bert_config.json": {
            "max_seq_length": 128}}),
    }  # fmt: skip


@pytest.fixture(scope="module")
def wide_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled model with a Dense layer to 256 dimensions."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Dense

    base = SentenceTransformer(str(bundled_model_path()), device="cpu", local_files_only=True)
    dense = Dense(384, 256)
    path = tmp_path_factory.mktemp("wide") / "minilm-256"
    SentenceTransformer(modules=[base[0], base[1], dense], device="cpu").save(str(path))
    return path


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[Server] = []

    def start(model: Path | None) -> Server:
        # Empty is the same as unset (Settings.from_env): the bundled model.
        chosen = "" if model is None else str(model)
        server = Server(tmp_path / "data", BOOTSTRAP_KEY, log=tmp_path / "serve.log",
                        MNEME_WORKER="on", MNEME_LOG_LEVEL="INFO",
                        MNEME_EMBEDDING_MODEL=chosen)  # fmt: skip
        started.append(server)
        asyncio.run(server.ready())
        return server

    yield start
    for server in started:
        if server.proc.poll() is None:
            server.stop()


async def write_and_wait(base: str, *texts: str) -> list[str]:
    """Write ``texts`` into the default store; their ids once their vectors are ready."""
    async with aiohttp.ClientSession(headers=ADMIN) as session:
        body = {"memories": [{"text": t} for t in texts]}
        async with session.post(f"{base}/api/v1/memories", json=body) as resp:
            assert resp.status == 200, await resp.text()
            ids = [m["id"] for m in (await resp.json())["memories"]]
        deadline = time.monotonic() + 120
        for memory_id in ids:
            while True:
                async with session.get(f"{base}/api/v1/memories/{memory_id}") as resp:
                    status = (await resp.json())["embeddingStatus"]
                if status == "ready":
                    break
                assert status == "pending" and time.monotonic() < deadline, status
                await asyncio.sleep(0.2)
    return ids


async def vector_search(base: str, query: str) -> list[str]:
    """Scroll 1.1 ranks by the vector arm alone: the query's vector against the stored."""
    async with aiohttp.ClientSession(headers={**ADMIN, "X-WOS-Model": "Scroll 1.1"}) as session:
        body = {"user_id": "default", "query": query}
        async with session.post(f"{base}/api/v1/memory/search", json=body) as resp:
            assert resp.status == 200, await resp.text()
            return [m["content"] for m in (await resp.json())["memories"]]


async def stored(url: str) -> dict[str, dict[str, Any]]:
    """Each memory's text -> its model, vector and chunk vectors, as the database holds them."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("""
            SELECT m.text, m.speaker, m.embedding_model, m.embedding::real[] AS embedding,
                   array(SELECT c.embedding::text FROM memory_chunks c
                         WHERE c.workspace_id = m.workspace_id AND c.memory_id = m.id
                         ORDER BY c.chunk_index) AS chunks
            FROM memories m
        """)
    finally:
        await conn.close()
    return {
        r["text"]: {
            "model": r["embedding_model"],
            "vector": np.array(r["embedding"], dtype=np.float32),
            "chunks": [np.array(json.loads(c), dtype=np.float32) for c in r["chunks"]],
            "speaker": r["speaker"],
        }
        for r in rows
    }


def expected(model: Path, text: str, speaker: str | None) -> tuple[Any, list[Any]]:
    """The model's own vector of ``text`` (its first window) and of each further window."""
    reference = SentenceTransformerEmbedder(model, device="cpu", backend="torch")
    windows = reference.chunk_many([text])[0]
    vectors = reference.encode_documents(
        [document_text(text[w.start : w.end], speaker) for w in windows]
    )
    return vectors[0], list(vectors[1:])


@pytest.mark.parametrize(("name", "onnx"), [("minilm-cls", False), ("minilm-128", True)])
def test_serve_embeds_chunks_and_searches_with_another_model(
    models: dict[str, Path], serve: Any, tmp_path: Path, name: str, onnx: bool
) -> None:
    model = models[name]
    server = serve(model)
    asyncio.run(write_and_wait(server.base, SHORT, LONG))
    rows = asyncio.run(stored(server.database_url()))
    bundled = SentenceTransformerEmbedder(device="cpu", backend="torch")
    for text in (SHORT, LONG):
        row = rows[text]
        assert row["model"] == name
        first, further = expected(model, text, row["speaker"])
        # The model's own vectors (the ONNX twin agrees with torch within its bound)...
        assert float(row["vector"] @ first) >= 0.999
        assert len(row["chunks"]) == len(further)
        for got, want in zip(row["chunks"], further, strict=True):
            assert float(got @ want) >= 0.999
    # ...which are not the bundled model's (whose window holds more of the long text).
    long_vector = bundled.encode_documents([document_text(LONG, rows[LONG]["speaker"])])[0]
    assert float(rows[LONG]["vector"] @ long_vector) < 0.99
    # The long text has more windows than the short one has; the 128-token model more.
    assert len(rows[LONG]["chunks"]) >= (4 if name == "minilm-128" else 1)
    # The query is encoded by the same model: the vector arm finds the needle in the middle.
    found = asyncio.run(vector_search(server.base, "Who collects brass telescopes?"))
    assert found[0] == LONG
    found = asyncio.run(vector_search(server.base, "How does Alice take her coffee?"))
    assert found[0] == SHORT
    exported = sorted(p.name for p in (tmp_path / "data" / "onnx").glob(f"{name}-*.onnx"))
    assert bool(exported) is onnx, exported
    log = [json.loads(line) for line in (tmp_path / "serve.log").read_text().splitlines()
           if line.startswith("{")]  # fmt: skip
    (ready,) = [e for e in log if e["msg"] == "embedding model ready"]
    assert ready["model"] == name
    assert ready["backend"] == ("onnx" if onnx else "torch")


def test_a_model_change_is_reported_and_reembed_moves_every_vector(
    models: dict[str, Path], serve: Any, tmp_path: Path
) -> None:
    first = serve(None)
    asyncio.run(write_and_wait(first.base, SHORT, LONG))
    url = first.database_url()
    first.stop()
    model = models["minilm-cls"]
    second = serve(model)
    # The stored vectors are the bundled model's: serve says so, and what to run.
    deadline = time.monotonic() + 60
    while True:
        log = [json.loads(line) for line in (tmp_path / "serve.log").read_text().splitlines()
               if line.startswith("{")]  # fmt: skip
        warned = [e for e in log if e["msg"].startswith("memories embedded by another model")]
        if warned or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(warned) == 1, log[-5:]
    assert warned[0]["level"] == "warning"
    assert warned[0]["memories"] == 2 and warned[0]["model"] == "minilm-cls"
    assert warned[0]["others"] == [DEFAULT_MODEL_NAME]
    assert "mneme reembed" in warned[0]["msg"]
    url = second.database_url()
    assert {r["model"] for r in asyncio.run(stored(url)).values()} == {DEFAULT_MODEL_NAME}
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
    env.update(MNEME_DATABASE_URL=url, MNEME_EMBEDDING_MODEL=str(model),
               MNEME_DATA_DIR=str(tmp_path / "data"))  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "reembed"], env=env, cwd=repo_root(),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "queued 2 memories for minilm-cls" in done.stderr
    # The running server's worker hears the requeue too and may store some of the vectors
    # itself: wait until every row is the new model's, whoever encoded it.
    deadline = time.monotonic() + 120
    while True:
        rows = asyncio.run(stored(url))
        if {r["model"] for r in rows.values()} == {"minilm-cls"}:
            break
        assert time.monotonic() < deadline, {t[:20]: r["model"] for t, r in rows.items()}
        time.sleep(0.2)
    for text, row in rows.items():
        vector, further = expected(model, text, row["speaker"])
        assert float(row["vector"] @ vector) >= 0.999
        assert len(row["chunks"]) == len(further)
    assert asyncio.run(vector_search(second.base, "Who collects brass telescopes?"))[0] == LONG


def test_a_model_that_does_not_fit_the_schema_stops_serve_at_once(
    wide_model: Path, tmp_path: Path
) -> None:
    server = Server(
        tmp_path / "data", BOOTSTRAP_KEY, pipe=True, MNEME_EMBEDDING_MODEL=str(wide_model)
    )
    try:
        _, err = server.proc.communicate(timeout=120)
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    assert server.proc.returncode == 1, err[-2000:]
    log = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    # Not retried: a dimension does not change by waiting.
    assert not [e for e in log if e["msg"] == "could not load the embedding model; trying again"]
    (fatal,) = [e for e in log if e["level"] == "critical"]
    assert (
        f"minilm-256 makes 256-dimensional vectors; the schema stores {db.VECTOR_DIMENSION}"
        in (fatal["exc"])
    )
    assert err.rstrip().splitlines()[-1] == (
        "mneme: error: the embedding model could not be loaded (see the log)"
    )
