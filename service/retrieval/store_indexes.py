"""A large store's own HNSW index, built and dropped by the janitor.

The one HNSW index over every store's vectors (``memories_embedding``) answers a store's
search by walking the graph of all of them and dropping the other stores' rows after
the walk. A store that holds ``min_docs`` active memories or more gets a partial index of
its own (``WHERE workspace_id = '…' AND store_id = '…'``): its searches' vector arms are
planned for their values (``plan_cache_mode = force_custom_plan``, ``service.ops.db``), so the
planner proves the predicate and walks the smaller graph. The search statements do not
change; a store without an index of its own is searched as before.

The price is paid by that store's writes: each vector enters two HNSW graphs (measured:
2.7 ms more a vector for a store of 20,000). A store falls back to the shared index when
it shrinks below half of ``min_docs`` (no build and drop back and forth at the line) or is
deleted, and every store's own index is dropped when the feature is turned off
(``min_docs`` 0).

Builds run one at a time across every instance (a session advisory lock on a connection
of their own, released if the builder dies) with ``CREATE INDEX CONCURRENTLY``, so writes
go on, in the server's ``maintenance_work_mem`` (a graph that does not fit it is built
on disk, slower; the embedded server's is a sixteenth of memory). A row is written
before its index is built and stamped once the index is valid: a build cut short leaves
a row naming the index to drop and build again.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass

import asyncpg

from service.ops import hosts
from service.ops.db import CONNECT_TIMEOUT_S
from service.queries.named import NamedSQL

log = logging.getLogger("mneme.store_indexes")

# Held while building or dropping: one instance at a time does either.
BUILDER_LOCK = 0x6D6E656D655F6978  # "mneme_ix"
PREFIX = "memories_embedding_s_"

_SIZES = """
SELECT workspace_id, store_id, sum(docs) AS docs FROM search_store_stats GROUP BY 1, 2
"""

# The largest store that needs an index: none yet, or a build cut short.
_WANTED = f"""
WITH sizes AS ({_SIZES})
SELECT s.workspace_id, s.store_id, s.docs FROM sizes s
JOIN stores st ON st.workspace_id = s.workspace_id AND st.id = s.store_id
LEFT JOIN store_vector_indexes i
       ON i.workspace_id = s.workspace_id AND i.store_id = s.store_id
WHERE s.docs >= :min_docs AND i.built_at IS NULL
ORDER BY s.docs DESC, s.workspace_id, s.store_id
LIMIT 1
"""
WANTED = NamedSQL(_WANTED)

# Indexes no store needs: the store is gone, has shrunk below half the line, or the
# feature is off (:min_docs = 0).
_UNWANTED = f"""
WITH sizes AS ({_SIZES})
SELECT i.workspace_id, i.store_id, i.index_name FROM store_vector_indexes i
LEFT JOIN stores st ON st.workspace_id = i.workspace_id AND st.id = i.store_id
LEFT JOIN sizes s ON s.workspace_id = i.workspace_id AND s.store_id = i.store_id
WHERE :min_docs = 0 OR st.id IS NULL OR coalesce(s.docs, 0) < :min_docs / 2
ORDER BY 1, 2
"""
UNWANTED = NamedSQL(_UNWANTED)

# Whether reconcile has anything to do; with the feature off, only drops can be due.
DUE = NamedSQL(f"SELECT EXISTS ({_UNWANTED}) OR EXISTS ({_WANTED})")
DUE_DROPS_ONLY = NamedSQL(f"SELECT EXISTS ({_UNWANTED}) OR false")

# format(): the ids are quoted by PostgreSQL, not by string pasting here.
CREATE = NamedSQL("""
SELECT format(
    'CREATE INDEX CONCURRENTLY %I ON memories USING hnsw (embedding vector_cosine_ops) '
    'WHERE workspace_id = %L AND store_id = %L', :name::text, :workspace::text, :store::text)
""")
DROP = NamedSQL("SELECT format('DROP INDEX CONCURRENTLY IF EXISTS %I', :name::text)")
# The row naming a store's index: written before the build, stamped once it is valid.
NAME = NamedSQL("""
INSERT INTO store_vector_indexes (workspace_id, store_id, index_name)
VALUES (:workspace, :store, :name)
ON CONFLICT (workspace_id, store_id) DO UPDATE SET index_name = excluded.index_name
""")
BUILT = NamedSQL("""
UPDATE store_vector_indexes SET built_at = now()
WHERE workspace_id = :workspace AND store_id = :store
""")
FORGET = NamedSQL(
    "DELETE FROM store_vector_indexes WHERE workspace_id = :workspace AND store_id = :store"
)
TRY_LOCK = NamedSQL("SELECT pg_try_advisory_lock(:lock)")
UNLOCK = NamedSQL("SELECT pg_advisory_unlock(:lock)")


def index_name(workspace_id: str, store_id: str) -> str:
    """The store's own index: a name of PostgreSQL's length, the same on every instance."""
    digest = hashlib.sha256(f"{workspace_id}\x1f{store_id}".encode()).hexdigest()
    return PREFIX + digest[:24]


@dataclass(frozen=True)
class Changes:
    built: list[str]
    dropped: list[str]


async def due(conn: asyncpg.Connection | asyncpg.Pool, min_docs: int) -> bool:
    """Whether ``reconcile`` has anything to do (a pooled connection answers: the pass
    opens its own only then, not once a minute on every instance)."""
    statement = DUE if min_docs > 0 else DUE_DROPS_ONLY
    return bool(await conn.fetchval(statement.sql, *statement.args({"min_docs": min_docs})))


async def reconcile(url: str, min_docs: int) -> Changes | None:
    """Drop the indexes no store needs, then build the one the largest store without one
    needs. ``None``: another instance is at it (nothing done here)."""
    conn = await hosts.connect(url, timeout=CONNECT_TIMEOUT_S)
    try:
        lock = TRY_LOCK.args({"lock": BUILDER_LOCK})
        if not await conn.fetchval(TRY_LOCK.sql, *lock):
            return None
        sizes = WANTED.args({"min_docs": min_docs})
        try:
            dropped = [
                await _drop(conn, workspace_id, store_id, name)
                for workspace_id, store_id, name in await conn.fetch(UNWANTED.sql, *sizes)
            ]
            built = []
            if min_docs > 0 and (wanted := await conn.fetchrow(WANTED.sql, *sizes)) is not None:
                built.append(await _build(conn, wanted[0], wanted[1], wanted[2]))
            return Changes(built, dropped)
        finally:
            await conn.execute(UNLOCK.sql, *lock)
    finally:
        await conn.close()


async def _drop(conn: asyncpg.Connection, workspace_id: str, store_id: str, name: str) -> str:
    await conn.execute(await conn.fetchval(DROP.sql, *DROP.args({"name": name})))
    await conn.execute(FORGET.sql, *FORGET.args({"workspace": workspace_id, "store": store_id}))
    log.info("dropped a store's own vector index", extra={"store": store_id, "index": name})
    return name


async def _build(conn: asyncpg.Connection, workspace_id: str, store_id: str, docs: int) -> str:
    name = index_name(workspace_id, store_id)
    store = {"workspace": workspace_id, "store": store_id}
    await conn.execute(NAME.sql, *NAME.args({**store, "name": name}))
    started = time.monotonic()
    # A build cut short leaves an invalid index of this name: dropped, built again.
    await conn.execute(await conn.fetchval(DROP.sql, *DROP.args({"name": name})))
    await conn.execute(await conn.fetchval(CREATE.sql, *CREATE.args({**store, "name": name})))
    await conn.execute(BUILT.sql, *BUILT.args(store))
    log.info(
        "built a store's own vector index",
        extra={
            "store": store_id,
            "index": name,
            "memories": docs,
            "seconds": round(time.monotonic() - started, 1),
        },
    )
    return name
