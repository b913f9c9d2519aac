"""The ONNX cache directory shared by processes that start together (replicas and workers
of one deployment), and read-only where an image baked the files into it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from embeddings import onnx
from embeddings.model import SentenceTransformerEmbedder, bundled_model_path

pytestmark = pytest.mark.slow  # pyproject.toml: markers

# Imports first (seconds each), then waits for the others: all four reach the cache
# directory within milliseconds of one another, as replicas started together do.
CHILD = """
import json, logging, sys, time
from pathlib import Path

import pytest
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s|%(message)s")
import sentence_transformers, torch  # the slow imports, before the start line
from embeddings.model import SentenceTransformerEmbedder
onnx_dir, ready, go = sys.argv[1:]
Path(ready).touch()
while not Path(go).exists():
    time.sleep(0.005)
e = SentenceTransformerEmbedder(backend="onnx", onnx_dir=onnx_dir, query_int8=True)
print(json.dumps([e.backend, e.query_backend]))
"""
PROCESSES = 4


def expected_names() -> list[str]:
    fp32 = f"model-{onnx.weights_digest(bundled_model_path())}.onnx"
    return sorted([onnx.LOCK, fp32, fp32.replace(".onnx", "-int8.onnx")])


def start_together(onnx_dir: Path, signals: Path) -> list[subprocess.Popen[str]]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    procs = []
    for i in range(PROCESSES):
        args = [str(onnx_dir), str(signals / f"ready-{i}"), str(signals / "go")]
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, *args],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        procs.append(proc)
    deadline = time.monotonic() + 120
    while len(list(signals.glob("ready-*"))) < PROCESSES:
        assert all(p.poll() is None for p in procs), "a process died before the start"
        assert time.monotonic() < deadline, "the processes did not get ready"
        time.sleep(0.05)
    (signals / "go").touch()
    return procs


def test_processes_starting_together_on_an_empty_dir_all_get_onnx(tmp_path: Path) -> None:
    onnx_dir, signals = tmp_path / "onnx", tmp_path / "signals"
    signals.mkdir()
    procs = start_together(onnx_dir, signals)
    outs = [p.communicate(timeout=300) for p in procs]
    for proc, (stdout, stderr) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, stderr[-3000:]
        assert json.loads(stdout.strip().splitlines()[-1]) == ["onnx", "onnx-int8, one at a time"]
    # One process made each file; the others waited for it and read it.
    notes = [line for _, stderr in outs for line in stderr.splitlines()]
    assert notes.count("mneme.embeddings|exporting the embedding model to ONNX") == 1
    assert notes.count("mneme.embeddings|quantizing the embedding model to int8") == 1
    assert sorted(p.name for p in onnx_dir.iterdir()) == expected_names()  # nothing stray


def snapshot(directory: Path) -> tuple[int, list[tuple[str, int, int]]]:
    """The directory's own mtime (any entry made or removed changes it) and its files."""
    return directory.stat().st_mtime_ns, sorted(
        (p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in directory.iterdir()
    )


def test_a_read_only_dir_holding_both_files_is_only_read(
    embedder: SentenceTransformerEmbedder, tmp_path: Path
) -> None:
    # As the container image bakes it: the fp32 export and its int8 twin, nothing else,
    # read-only (tests run as root, whom the mode does not stop: the snapshot does).
    assert embedder._onnx is not None
    baked = tmp_path / "baked"
    baked.mkdir()
    for path in embedder._onnx.path.parent.glob("*.onnx"):
        shutil.copy2(path, baked)
    assert sorted([*(p.name for p in baked.iterdir()), onnx.LOCK]) == expected_names()
    baked.chmod(0o555)
    before = snapshot(baked)
    try:
        again = SentenceTransformerEmbedder(backend="onnx", onnx_dir=baked, query_int8=True)
        assert (again.backend, again.query_backend) == ("onnx", "onnx-int8, one at a time")
        assert snapshot(baked) == before  # no lock file, no temporary, nothing rewritten
    finally:
        baked.chmod(0o755)


def test_what_a_process_killed_while_making_a_file_left_is_removed(
    embedder: SentenceTransformerEmbedder, tmp_path: Path
) -> None:
    stray = tmp_path / f"{onnx.MAKING}dead"
    stray.mkdir()
    (stray / "model.onnx").write_bytes(b"half an export")
    twin = onnx.load(embedder._model, bundled_model_path(), tmp_path, 1)
    assert twin is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == [onnx.LOCK, twin.path.name]
