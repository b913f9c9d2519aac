"""Multi-host URLs (service.ops.hosts): a listed host that never answers costs its share
of the connect timeout once, not every connection's whole timeout."""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections.abc import AsyncIterator

import asyncpg
import pytest

from embeddings import worker as worker_module
from embeddings.model import SentenceTransformerEmbedder
from embeddings.worker import Worker
from service.ops import db, embedding, hosts
from service.settings import Settings


def test_hosts_of_a_url() -> None:
    url = "postgresql://u:p%40ss@n1:5433,[::1]:5434,n3/mneme?target_session_attrs=read-write"
    assert hosts.hosts_of(url) == [("n1", 5433), ("::1", 5434), ("n3", 5432)]
    assert hosts.hosts_of("postgresql://u@only/db") == [("only", 5432)]
    assert hosts.hosts_for("postgresql://u@only/db") is None  # asyncpg's own connect


@pytest.fixture
async def silent_host() -> AsyncIterator[tuple[str, int]]:
    """A host that takes TCP connections and never says a word: a server that hangs, or,
    as far as a connect timeout can tell, a machine whose SYNs go unanswered."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    yield "127.0.0.1", server.sockets[0].getsockname()[1]
    for writer in held:
        writer.close()
    server.close()
    await server.wait_closed()


def with_hosts(url: str, *extra: tuple[str, int]) -> str:
    """``url`` with ``extra`` hosts listed before its own. The tests' PostgreSQL listens
    on a Unix socket only (``?host=<dir>``): listed as the directory, quoted, with the
    socket's port."""
    parts = urllib.parse.urlsplit(url)
    auth, _, own = parts.netloc.rpartition("@")
    query = urllib.parse.parse_qs(parts.query)
    if "host" in query:
        own = f"{urllib.parse.quote(query.pop('host')[0], safe='')}:5432"
    listed = ",".join([*(f"{h}:{p}" for h, p in extra), own])
    return parts._replace(
        netloc=f"{auth}@{listed}", query=urllib.parse.urlencode(query, doseq=True)
    ).geturl()


async def test_a_silent_first_host_is_passed_once_then_skipped(
    db_url: str, silent_host: tuple[str, int]
) -> None:
    url = with_hosts(db_url, silent_host)
    with pytest.raises(TimeoutError):  # asyncpg alone: the silent host takes it all
        await asyncpg.connect(url, timeout=2.0)

    started = time.monotonic()
    conn = await hosts.connect(url, timeout=2.0)
    first = time.monotonic() - started
    await conn.close()
    started = time.monotonic()
    conn = await hosts.connect(url, timeout=2.0)
    second = time.monotonic() - started
    assert await conn.fetchval("SELECT 1") == 1
    await conn.close()
    assert 0.9 <= first < 2.0  # its half of the timeout, then the live host
    assert second < 0.9  # the host that answered last goes first (the silent one: 1 s)


async def test_the_service_pool_reaches_the_live_host(
    db_url: str, silent_host: tuple[str, int], settings: Settings
) -> None:
    url = with_hosts(db_url, silent_host)
    pool = await db.create_pool(url, settings.with_overrides(pool_min=2, pool_max=4))
    try:
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT 1") == 1
    finally:
        await pool.close()


async def test_every_host_failing_raises_the_last_failure(
    silent_host: tuple[str, int],
) -> None:
    url = f"postgresql://u@{silent_host[0]}:{silent_host[1]},127.0.0.1:1/db"
    with pytest.raises((OSError, TimeoutError)):
        await hosts.connect(url, timeout=1.0)


async def test_prefer_standby_takes_the_primary_when_no_standby_answers(
    db_url: str, silent_host: tuple[str, int]
) -> None:
    base = with_hosts(db_url, silent_host)
    url = f"{base}{'&' if '?' in base else '?'}target_session_attrs=prefer-standby"
    assert hosts.hosts_for(url).passes == ("standby", "any")  # type: ignore[union-attr]
    conn = await hosts.connect(url, timeout=3.0)
    try:
        assert await conn.fetchval("SELECT pg_is_in_recovery()") is False
    finally:
        await conn.close()


async def test_the_worker_listens_past_a_silent_first_host(
    db_url: str, silent_host: tuple[str, int], embedder: SentenceTransformerEmbedder
) -> None:
    """A worker behind PgBouncer LISTENs on a URL of its own (``MNEME_DIRECT_DATABASE_URL``):
    a multi-host one is connected host by host too (asyncpg alone would spend its 60 s
    default timeout on the silent host)."""
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
    try:
        settings = Settings(
            database_url=db_url,
            database_pooler="transaction",
            direct_database_url=with_hosts(db_url, silent_host),
        )  # a pooler in front: the worker listens on the direct URL
        worker = Worker(pool, embedder, listen=embedding.worker_listen(settings))
        started = time.monotonic()
        conn = await asyncio.wait_for(worker._listen(None), 15)
        assert conn is not None and time.monotonic() - started < 10
        await pool.execute("SELECT pg_notify($1, 'x')", worker_module.CHANNEL)
        await asyncio.wait_for(worker._wake.wait(), 5)
        await worker._unlisten(conn)
        assert conn.is_closed()
    finally:
        await pool.close()
