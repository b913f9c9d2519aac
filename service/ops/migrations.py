"""The migration runner: ``sql/migrations/NNNN_name.sql``, applied in order, forward only.

Each applied file is recorded in ``schema_migrations`` with its SHA-256. The runner holds
a session advisory lock for the whole run, so two runners started at once apply every
file exactly once (the second waits, then finds nothing to do). Each file runs in its own
transaction. A file that was edited after it was applied is refused, as is a database
that knows versions this code does not (it is newer than the code).
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from service.queries.named import NamedSQL

# pg_advisory_lock key: the ASCII of "mneme" — any constant works; it just has to be shared.
ADVISORY_LOCK_ID = 0x6D6E656D65
FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""

SELECT_APPLIED = NamedSQL("SELECT version, name, checksum FROM schema_migrations ORDER BY version")

TABLE_EXISTS = NamedSQL("SELECT to_regclass('schema_migrations') IS NOT NULL")

RECORD = NamedSQL(
    "INSERT INTO schema_migrations (version, name, checksum) VALUES (:version, :name, :checksum)"
)

LOCK = NamedSQL("SELECT pg_advisory_lock(:id)")
UNLOCK = NamedSQL("SELECT pg_advisory_unlock(:id)")


class MigrationError(RuntimeError):
    """The database and the migration files disagree; the message says how."""


class PendingMigrations(MigrationError):
    """The database is behind: ``pending`` names the migrations not applied yet."""

    def __init__(self, pending: list[str]) -> None:
        super().__init__(
            f"the database is behind: {len(pending)} migration(s) pending ({', '.join(pending)}). "
            "Run `mneme migrate` (with the same MNEME_DATABASE_URL) and start again"
        )
        self.pending = pending


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path
    sql: str
    checksum: str


@dataclass(frozen=True)
class MigrationState:
    version: int
    name: str
    state: str  # "applied", "pending" or "edited"


def default_dir() -> Path:
    """``sql/migrations`` of the source tree, or its copy inside an installed wheel."""
    here = Path(__file__).resolve().parent.parent  # the service package
    for candidate in (here / "sql" / "migrations", here.parent / "sql" / "migrations"):
        if candidate.is_dir():
            return candidate
    raise MigrationError(f"no sql/migrations directory found near {here}")


def load(directory: Path | None = None) -> list[Migration]:
    """The migration files of ``directory``; the shipped ones are read once per process
    (``/readyz`` compares them with the database on every probe)."""
    if directory is None:
        return list(_shipped())
    return _read(directory)


@functools.cache
def _shipped() -> tuple[Migration, ...]:
    return tuple(_read(default_dir()))


def _read(directory: Path) -> list[Migration]:
    migrations: list[Migration] = []
    for path in sorted(directory.iterdir()):
        if path.suffix != ".sql":
            continue
        match = FILE_RE.match(path.name)
        if match is None:
            raise MigrationError(f"{path.name}: migration files are named NNNN_name.sql")
        raw = path.read_bytes()
        migrations.append(
            Migration(
                version=int(match.group(1)),
                name=path.stem,
                path=path,
                sql=raw.decode("utf-8"),
                checksum=hashlib.sha256(raw).hexdigest(),
            )
        )
    versions = [m.version for m in migrations]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"two migration files share a version number in {directory}")
    return migrations


async def _applied(conn: asyncpg.Connection) -> dict[int, tuple[str, str]]:
    if not await TABLE_EXISTS.fetchval(conn):
        return {}
    return {r["version"]: (r["name"], r["checksum"]) for r in await SELECT_APPLIED.fetch(conn)}


def _compare(
    migrations: list[Migration], applied: dict[int, tuple[str, str]]
) -> list[MigrationState]:
    known = {m.version for m in migrations}
    unknown = sorted(set(applied) - known)
    if unknown:
        names = ", ".join(applied[v][0] for v in unknown)
        raise MigrationError(
            f"the database has migrations this code does not know ({names}); "
            "it was migrated by a newer Mneme"
        )
    states = []
    for m in migrations:
        if m.version not in applied:
            state = "pending"
        elif applied[m.version][1] != m.checksum:
            state = "edited"
        else:
            state = "applied"
        states.append(MigrationState(m.version, m.name, state))
    return states


async def status(conn: asyncpg.Connection, directory: Path | None = None) -> list[MigrationState]:
    """Every migration file with its state; raises if the database is ahead of the code."""
    return _compare(load(directory), await _applied(conn))


def _refuse_edited(states: list[MigrationState]) -> None:
    edited = [s.name for s in states if s.state == "edited"]
    if edited:
        raise MigrationError(
            f"applied migration file(s) were edited after being applied: {', '.join(edited)}. "
            "Migrations are forward-only: restore the file and add a new migration instead"
        )


async def check_current(conn: asyncpg.Connection, directory: Path | None = None) -> None:
    """Refuse a database that is behind, edited or ahead, saying what to do."""
    states = await status(conn, directory)
    _refuse_edited(states)
    pending = [s.name for s in states if s.state == "pending"]
    if pending:
        raise PendingMigrations(pending)


async def migrate(conn: asyncpg.Connection, directory: Path | None = None) -> list[str]:
    """Apply every pending migration; returns the names applied by this call."""
    migrations = load(directory)
    await LOCK.execute(conn, id=ADVISORY_LOCK_ID)
    try:
        await conn.execute(CREATE_TABLE)
        states = _compare(migrations, await _applied(conn))
        _refuse_edited(states)
        pending = {s.version for s in states if s.state == "pending"}
        done: list[str] = []
        for m in migrations:
            if m.version not in pending:
                continue
            async with conn.transaction():
                try:
                    await conn.execute(m.sql)
                except asyncpg.PostgresError as exc:
                    raise MigrationError(f"{m.path.name} failed: {exc}") from exc
                await RECORD.execute(conn, version=m.version, name=m.name, checksum=m.checksum)
            done.append(m.name)
        return done
    finally:
        await UNLOCK.execute(conn, id=ADVISORY_LOCK_ID)
