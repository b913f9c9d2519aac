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
from service.queries.memories import STORE_COLUMNS, Store, readable_by
from service.queries.named import NamedSQL

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


INSERT_STORE = NamedSQL(f"""
INSERT INTO stores (workspace_id, id, name, description, metadata, strip_temporal)
VALUES (:workspace, :id, :name, :description, :metadata, :strip_temporal)
ON CONFLICT DO NOTHING
RETURNING {STORE_COLUMNS}
""")


async def create_store(
    conn: Conn,
    workspace_id: str,
    name: str,
    description: str,
    metadata: dict[str, str],
    strip_temporal: bool,
) -> Store | None:
    """``None`` when the name is taken (case-insensitively)."""
    row = await INSERT_STORE.fetchrow(
        conn,
        workspace=workspace_id,
        id=new_id("memstore"),
        name=name,
        description=description,
        metadata=metadata,
        strip_temporal=strip_temporal,
    )
    return None if row is None else Store(**row)


UPDATE_STORE = NamedSQL(f"""
UPDATE stores SET name = :name, description = :description, metadata = :metadata,
                  strip_temporal = :strip_temporal, updated_at = now()
WHERE workspace_id = :workspace AND id = :id
RETURNING {STORE_COLUMNS}
""")


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
    row = await UPDATE_STORE.fetchrow(
        conn,
        workspace=workspace_id,
        id=store.id,
        name=name,
        description=description,
        metadata=metadata,
        strip_temporal=strip_temporal,
    )
    return None if row is None else Store(**row)


LIST_STORES_AFTER = NamedSQL(f"""
SELECT {STORE_COLUMNS} FROM stores
WHERE workspace_id = :workspace AND id > :after
ORDER BY id
LIMIT :limit
""")

LIST_STORES_BEFORE = NamedSQL(f"""
SELECT {STORE_COLUMNS} FROM stores
WHERE workspace_id = :workspace AND id < :before
ORDER BY id DESC
LIMIT :limit
""")


async def list_stores(
    conn: Conn, workspace_id: str, *, after: str = "", before: str | None = None, limit: int
) -> tuple[list[Store], bool]:
    """A page of stores by creation (id) ascending, and whether more lie in that direction."""
    if before is not None:
        rows = await LIST_STORES_BEFORE.fetch(
            conn, workspace=workspace_id, before=before, limit=limit + 1
        )
        stores = [Store(**r) for r in rows[:limit]]
        stores.reverse()
    else:
        rows = await LIST_STORES_AFTER.fetch(
            conn, workspace=workspace_id, after=after, limit=limit + 1
        )
        stores = [Store(**r) for r in rows[:limit]]
    return stores, len(rows) > limit


STORE_EXISTS = NamedSQL("""
SELECT EXISTS (SELECT 1 FROM stores WHERE workspace_id = :workspace AND id = :id)
""")


async def store_exists(conn: Conn, workspace_id: str, store_id: str) -> bool:
    """Whether ``store_id`` is a store of the workspace (a page of the list may start there)."""
    found: bool = await STORE_EXISTS.fetchval(conn, workspace=workspace_id, id=store_id)
    return found


HAS_ACTIVE = NamedSQL("""
SELECT EXISTS (
    SELECT 1 FROM memories
    WHERE workspace_id = :workspace AND store_id = :store AND status = 'active'
)
""")

DELETE_STORE = NamedSQL("DELETE FROM stores WHERE workspace_id = :workspace AND id = :id")


# Taken before HAS_ACTIVE: a write in flight holds a key-share lock on the store's row (its
# memory's foreign key) until it commits, so this waits for it, and HAS_ACTIVE, a statement
# of its own, then sees its memory. Without it, the delete would cascade over a memory whose
# write was acknowledged meanwhile.
LOCK_STORE = NamedSQL(
    "SELECT 1 FROM stores WHERE workspace_id = :workspace AND id = :id FOR UPDATE"
)


async def has_active(conn: Conn, workspace_id: str, store_id: str) -> bool:
    """Whether the store holds an active memory, once every write in flight to it is done
    (in the caller's transaction: no write starts before it ends)."""
    await LOCK_STORE.execute(conn, workspace=workspace_id, id=store_id)
    return bool(await HAS_ACTIVE.fetchval(conn, workspace=workspace_id, store=store_id))


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
    await DELETE_STORE.execute(conn, workspace=workspace_id, id=store_id)


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
WHERE workspace_id = :workspace AND store_id = :store
  AND path IS NOT NULL AND status <> 'deleted'
  AND mneme_readable(scope, :is_service, :member, :rooms)
  AND path >= :prefix {{upper}}
  -- the plain bound is the index range; the pair leaves out the anchor and what precedes it
  AND path {{op}}= :cursor AND (path, id) {{op}} (:cursor, :cursor_id)
ORDER BY path {{direction}}  -- a live path is unique: no id needed to order the page
LIMIT :limit
"""


def _list_sql(op: str, direction: str, bounded: bool) -> NamedSQL:
    upper = "AND path < :upper" if bounded else ""
    return NamedSQL(_LIST.format(op=op, direction=direction, upper=upper))


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
    after: tuple[str, str] | None,
    before: tuple[str, str] | None,
    limit: int,
) -> tuple[list[Entry], bool]:
    """A page in (path, id) order, ascending, strictly after or before an anchor's
    (path, id); and whether more lie in the paging direction."""
    upper = successor(prefix)
    values = {
        **readable_by(principal),
        "store": store_id,
        "prefix": prefix,
        "limit": limit + 1,
        **({} if upper is None else {"upper": upper}),
    }
    if before is not None:
        statement = LIST_BEFORE if upper is None else LIST_BEFORE_BOUNDED
        rows = await statement.fetch(conn, cursor=before[0], cursor_id=before[1], **values)
        entries = [Entry(**r) for r in rows[:limit]]
        entries.reverse()
    else:
        statement = LIST_AFTER if upper is None else LIST_AFTER_BOUNDED
        # ("", "") sorts before every (path, id): the first page.
        path, memory_id = after if after is not None else ("", "")
        rows = await statement.fetch(conn, cursor=path, cursor_id=memory_id, **values)
        entries = [Entry(**r) for r in rows[:limit]]
    return entries, len(rows) > limit


# A deleted memory (a tombstone, until it is purged) still anchors a page: a client
# paging through the list must not be refused because the last memory it saw was deleted.
# Its path may be taken again by then, so the page starts after its (path, id), not its path.
PATH_OF = NamedSQL("""
SELECT path FROM memories
WHERE workspace_id = :workspace AND store_id = :store AND id = :id AND path IS NOT NULL
  AND mneme_readable(scope, :is_service, :member, :rooms)
""")


async def path_of(conn: Conn, principal: Principal, store_id: str, memory_id: str) -> str | None:
    """The path of a memory this caller could see listed in the store (after/before_id)."""
    value: str | None = await PATH_OF.fetchval(
        conn, store=store_id, id=memory_id, **readable_by(principal)
    )
    return value
