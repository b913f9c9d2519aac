"""Last-used stamps of the memories searches return (memory_uses): one upsert per batch,
written off the response path by ``service.ops.toucher``."""

from __future__ import annotations

import asyncpg

from service.queries.named import NamedSQL

# In id order: two instances flushing at once take the rows' locks in the same order.
# The memory's own row is not locked (a lock is a write to its page): the foreign key
# checks a memory's first stamp, and a memory deleted meanwhile fails that check.
TOUCH = NamedSQL("""
INSERT INTO memory_uses AS u (workspace_id, memory_id, last_used_at)
SELECT m.workspace_id, m.id, now() FROM memories m
WHERE m.workspace_id = :workspace AND m.id = ANY(:ids::text[])
ORDER BY m.id
ON CONFLICT (workspace_id, memory_id) DO UPDATE SET last_used_at = excluded.last_used_at
WHERE u.last_used_at < excluded.last_used_at
""")


async def touch(conn: asyncpg.Connection | asyncpg.Pool, workspace_id: str, ids: list[str]) -> None:
    """``last_used_at = now()`` for memories a search returned (in memory_uses).

    A memory deleted while its stamp was being written fails the foreign key check; the
    stamp is then written again, and no longer finds it.
    """
    try:
        await TOUCH.execute(conn, workspace=workspace_id, ids=ids)
    except asyncpg.ForeignKeyViolationError:
        await TOUCH.execute(conn, workspace=workspace_id, ids=ids)
