"""The whole shape of a scaled-out deployment, with real processes on one machine
(issue 15): a PostgreSQL primary and a streaming standby (pg_basebackup -R), PgBouncer in
transaction mode in front of the primary, two `mneme serve` replicas (worker off) and two
`mneme worker` processes. 2,000 single writes from 8 clients across both replicas, one
worker SIGKILLed half-way: every acknowledged memory gets its vector, no request gets a
5xx, reads run on the standby, and both replicas answer a search alike.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from bench.common import free_port, wait_ready
from tests.conftest import PgServer
from tests.helpers import BOOTSTRAP_KEY
from tests.pgbouncer import pgbouncer_for
from tests.standby import caught_up, standby_of

pytestmark = pytest.mark.slow

WRITES, CLIENTS = 2000, 8
HEADERS = {"Authorization": f"Bearer {BOOTSTRAP_KEY}"}


class Processes:
    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.env, self.cwd = env, cwd
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, command: str, **env: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", command], env={**self.env, **env},
            cwd=self.cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def deployment(pg_server: PgServer) -> Iterator[dict[str, Any]]:
    name = asyncio.run(pg_server.create_database())
    primary = pg_server.uri_for(name)
    with standby_of(pg_server.embedded) as standby, \
            pgbouncer_for(pg_server.embedded, pool_size=6) as bouncer:  # fmt: skip
        work = Path(tempfile.mkdtemp(prefix="mneme-scale-"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
        env.update(
            MNEME_DATABASE_URL=bouncer.uri_for(name), MNEME_DATABASE_POOLER="transaction",
            MNEME_DIRECT_DATABASE_URL=primary, MNEME_READ_DATABASE_URL=standby.uri_for(name),
            MNEME_BOOTSTRAP_KEY=BOOTSTRAP_KEY, MNEME_LOG_LEVEL="WARNING",
            MNEME_RATE_LIMITS="free=100000,pro=100000,scale=100000",
            MNEME_ONNX_DIR=str(work / "onnx"), MNEME_EMBED_LEASE_SECONDS="5",
            MNEME_EMBED_CLAIM_SIZE="64", MNEME_POOL_MAX="4",
        )  # fmt: skip
        procs = Processes(env, work)
        try:
            yield {"procs": procs, "primary": primary, "standby": standby.uri_for(name)}
        finally:
            procs.stop()
            asyncio.run(pg_server.drop_database(name))


async def test_replicas_and_workers_share_one_database(deployment: dict[str, Any]) -> None:
    procs: Processes = deployment["procs"]
    ports = [free_port(), free_port()]
    procs.start("serve", MNEME_PORT=str(ports[0]), MNEME_WORKER="off")
    bases = [f"http://127.0.0.1:{p}" for p in ports]
    await wait_ready(bases[0], within_s=180)  # the first exports the model for the rest
    procs.start("serve", MNEME_PORT=str(ports[1]), MNEME_WORKER="off")
    doomed = procs.start("worker")
    procs.start("worker")
    await wait_ready(bases[1], within_s=180)

    statuses: Counter[int] = Counter()
    acked: list[str] = []
    written = 0

    async def client(n: int, session: aiohttp.ClientSession) -> None:
        nonlocal written
        for i in range(WRITES // CLIENTS):
            body = {"text": f"Client {n} noted fact number {i} about the harbour."}
            async with session.post(f"{bases[(n + i) % 2]}/api/v1/memories", json=body) as r:
                statuses[r.status] += 1
                if r.status == 201:
                    acked.append((await r.json())["id"])
            written += 1
            if written == WRITES // 2 and doomed.poll() is None:
                doomed.send_signal(signal.SIGKILL)  # mid-batch, its claims leased

    async with aiohttp.ClientSession(headers=HEADERS) as session:
        await asyncio.gather(*(client(n, session) for n in range(CLIENTS)))
        assert doomed.poll() is not None
        assert set(statuses) == {201}, statuses
        assert len(acked) == WRITES

        # Every acknowledged memory gets its vector (the killed worker's leases run out).
        primary = await asyncpg.connect(deployment["primary"])
        try:
            for _ in range(600):
                waiting = await primary.fetchval(
                    "SELECT count(*) FROM memories WHERE id = ANY($1::text[]) "
                    "AND embedding_status <> 'ready'", acked,
                )  # fmt: skip
                if waiting == 0:
                    break
                await asyncio.sleep(0.5)
            assert waiting == 0
        finally:
            await primary.close()
        await caught_up(deployment["primary"], deployment["standby"])

        standby = await asyncpg.connect(deployment["standby"])
        try:
            fetched = "SELECT tup_fetched FROM pg_stat_database WHERE datname = current_database()"
            before = await standby.fetchval(fetched)

            async def ask(base: str) -> list[str]:
                body = {"user_id": "default", "query": "harbour fact number 7", "max_results": 10}
                async with session.post(f"{base}/api/v1/memory/search", json=body) as r:
                    assert r.status == 200
                    return [m["id"] for m in (await r.json())["memories"]]

            # At once: what one returns is stamped used (off the response path, within
            # half a second), and recency is one of Tablet 2's features.
            answers = await asyncio.gather(*(ask(base) for base in bases))
            for base in bases:
                async with session.get(f"{base}/api/v1/memories?limit=50") as r:
                    assert r.status == 200
            await asyncio.sleep(1)  # statistics are reported when a backend goes idle
            assert await standby.fetchval(fetched) > before  # the reads ran here
        finally:
            await standby.close()
        assert answers[0] == answers[1] and len(answers[0]) == 10
