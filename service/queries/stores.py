"""Memory stores and their path-addressed memories (seed 003): the SQL.

Paths live in a ``COLLATE "C"`` column, so their order is byte order (= code point
order of UTF-8), and a prefix is a range: ``path >= prefix AND path < successor(prefix)``
on ``memories_path_key`` — an index range scan, never a LIKE. Paths are unique among a
store's non-deleted memories, so ``path`` alone is the keyset; ordering by ``(path, id)``
is the same order.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from service.ids import new_id
from service.queries import Conn
from service.queries.keys import Principal
from service.queries.memories import STORE_COLUMNS, Store

MAX_CODE_POINT = 0x10FFFF


def successor(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix``.

    ``None`` when there is none (empty prefix, or only U+10FFFF characters).
    """
    trimmed = prefix.rstrip(chr(MAX_CODE_POINT))
    if not trimmed:
        return None
    last = ord(trimmed[-1]) + 1
    if 0xD800 <= last <= 0xDFFF:  # surrogates are not characters: step over them
        last = 0xE000
    return trimmed[:-1] + chr(last)


# --- stores -------------------------------------------------------------------------------


INSERT_STORE = f"""
INSERT INTO stores (workspace_id, id, name, description, metadata, strip_temporal)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT DO NOTHING
RETURNING {STORE_COLUMNS}
"""


async def create_store(
    conn: Conn,
    workspace_id: str,
    name: str,
    description: str,
    metadata: dict[str, str],
    strip_temporal: bool,
) -> Store | None:
    """``None`` when the name is taken (case-insensitively)."""
    row = await conn.fetchrow(
        INSERT_STORE, workspace_id, new_id("memstore"), name, description, metadata, strip_temporal
    )
    return None if row is None else Store(*row)


UPDATE_STORE = f"""
UPDATE stores SET name = $3, description = $4, metadata = $5, strip_temporal = $6,
                  updated_at = now()
WHERE workspace_id = $1 AND id = $2
RETURNING {STORE_COLUMNS}
"""


async def update_store(
    conn: Conn,
    workspace_id: str,
    store: Store,
    name: str,
    description: str,
    metadata: dict[str, str],
    strip_temporal: bool,
) -> Store | None:
    """``None`` when the store is gone (deleted meanwhile); raises
    ``asyncpg.UniqueViolationError`` when the new name is taken."""
    row = await conn.fetchrow(
        UPDATE_STORE, workspace_id, store.id, name, description, metadata, strip_temporal
    )
    return None if row is None else Store(*row)


LIST_STORES_AFTER = f"""
SELECT {STORE_COLUMNS} FROM stores
WHERE workspace_id = $1 AND id > $2
ORDER BY id
LIMIT $3
"""

LIST_STORES_BEFORE = f"""
SELECT {STORE_COLUMNS} FROM stores
WHERE workspace_id = $1 AND id < $2
ORDER BY id DESC
LIMIT $3
"""


async def list_stores(
    conn: Conn, workspace_id: str, *, after: str = "", before: str | None = None, limit: int
) -> tuple[list[Store], bool]:
    """A page of stores by creation (id) ascending, and whether more lie in that direction."""
    if before is not None:
        rows = await conn.fetch(LIST_STORES_BEFORE, workspace_id, before, limit + 1)
        stores = [Store(*r) for r in rows[:limit]]
        stores.reverse()
    else:
        rows = await conn.fetch(LIST_STORES_AFTER, workspace_id, after, limit + 1)
        stores = [Store(*r) for r in rows[:limit]]
    return stores, len(rows) > limit


HAS_ACTIVE = """
SELECT EXISTS (
    SELECT 1 FROM memories WHERE workspace_id = $1 AND store_id = $2 AND status = 'active'
)
"""

DELETE_STORE = "DELETE FROM stores WHERE workspace_id = $1 AND id = $2"


async def has_active(conn: Conn, workspace_id: str, store_id: str) -> bool:
    return bool(await conn.fetchval(HAS_ACTIVE, workspace_id, store_id))


# A deleted store's version row (0008_store_versions.sql: no foreign key, so that stamping a
# version never waits on a store being deleted), removed afterwards by the janitor.
PRUNE_VERSIONS = """
DELETE FROM store_versions v
WHERE NOT EXISTS (SELECT 1 FROM stores s WHERE s.workspace_id = v.workspace_id
                  AND s.id = v.store_id)
"""


async def prune_versions(conn: Conn) -> None:
    await conn.execute(PRUNE_VERSIONS)


async def delete_store(conn: asyncpg.Connection, workspace_id: str, store_id: str) -> None:
    """Deletes the store with all its memories, versions and speakers (cascade)."""
    await conn.execute(DELETE_STORE, workspace_id, store_id)


# --- path-addressed memories ------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """A list item of seed 003: everything but the content."""

    id: str
    path: str
    content_size_bytes: int
    content_sha256: str
    metadata: dict[str, str]
    created_at: datetime
    updated_at: datetime


ENTRY_COLUMNS = "id, path, content_size_bytes, content_sha256, metadata, created_at, updated_at"

_LIST = f"""
SELECT {ENTRY_COLUMNS} FROM memories
WHERE workspace_id = $1 AND store_id = $2
  AND path IS NOT NULL AND status <> 'deleted'
  AND mneme_readable(scope, $6, $7, $8)
  AND path >= $3 {{upper}}
  AND path {{op}} $4
ORDER BY path {{direction}}
LIMIT $5
"""


def _list_sql(op: str, direction: str, bounded: bool) -> str:
    return _LIST.format(op=op, direction=direction, upper="AND path < $9" if bounded else "")


# Static statements, one per (direction, prefix bounded or not).
LIST_AFTER = _list_sql(">", "ASC", bounded=False)
LIST_AFTER_BOUNDED = _list_sql(">", "ASC", bounded=True)
LIST_BEFORE = _list_sql("<", "DESC", bounded=False)
LIST_BEFORE_BOUNDED = _list_sql("<", "DESC", bounded=True)


async def list_entries(
    conn: Conn,
    principal: Principal,
    store_id: str,
    *,
    prefix: str,
    after_path: str | None,
    before_path: str | None,
    limit: int,
) -> tuple[list[Entry], bool]:
    """A page in (path, id) order, ascending; and whether more lie in the paging direction."""
    upper = successor(prefix)
    who = [principal.is_service, principal.member, principal.rooms]
    extra = [] if upper is None else [upper]
    ws = principal.workspace_id
    if before_path is not None:
        sql = LIST_BEFORE if upper is None else LIST_BEFORE_BOUNDED
        rows = await conn.fetch(sql, ws, store_id, prefix, before_path, limit + 1, *who, *extra)
        entries = [Entry(*r) for r in rows[:limit]]
        entries.reverse()
    else:
        sql = LIST_AFTER if upper is None else LIST_AFTER_BOUNDED
        start = after_path if after_path is not None else ""
        # "" sorts before every path, so (path > "") is the first page.
        rows = await conn.fetch(sql, ws, store_id, prefix, start, limit + 1, *who, *extra)
        entries = [Entry(*r) for r in rows[:limit]]
    return entries, len(rows) > limit


PATH_OF = """
SELECT path FROM memories
WHERE workspace_id = $1 AND store_id = $2 AND id = $3 AND path IS NOT NULL AND status <> 'deleted'
  AND mneme_readable(scope, $4, $5, $6)
"""


async def path_of(conn: Conn, principal: Principal, store_id: str, memory_id: str) -> str | None:
    """The path of a memory this caller could see listed in the store (after/before_id)."""
    value: str | None = await conn.fetchval(
        PATH_OF,
        principal.workspace_id,
        store_id,
        memory_id,
        principal.is_service,
        principal.member,
        principal.rooms,
    )
    return value
