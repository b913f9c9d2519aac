"""Keeping the BM25 statistics small: the triggers of 0003_search_stats.sql insert
deltas (+1/-1 per lexeme and store) so that writers never wait on a hot counter row; the
janitor (``service.ops.jobs``) folds each store's deltas into one row per lexeme."""

from __future__ import annotations

import asyncpg

from service.queries.named import NamedSQL

FRESH_STORES = NamedSQL("""
SELECT workspace_id, store_id FROM search_terms WHERE NOT compacted
UNION
SELECT workspace_id, store_id FROM search_store_stats WHERE NOT compacted
LIMIT :stores
""")

# Folds a store's deltas into one row per lexeme (and one stats row). Rows a concurrent
# write inserts meanwhile are not seen by the DELETE and stay as they are; a deleted
# store's deltas sum to zero and disappear.
COMPACT_TERMS = NamedSQL("""
WITH gone AS (
    DELETE FROM search_terms WHERE workspace_id = :workspace AND store_id = :store
    RETURNING lexeme, df
)
INSERT INTO search_terms (workspace_id, store_id, lexeme, df, compacted)
SELECT :workspace, :store, lexeme, sum(df), true FROM gone GROUP BY lexeme HAVING sum(df) <> 0
""")

COMPACT_STORE_STATS = NamedSQL("""
WITH gone AS (
    DELETE FROM search_store_stats WHERE workspace_id = :workspace AND store_id = :store
    RETURNING docs, length, self_docs, image_docs
)
INSERT INTO search_store_stats
    (workspace_id, store_id, docs, length, self_docs, image_docs, compacted)
SELECT :workspace, :store, sum(docs), sum(length), sum(self_docs), sum(image_docs), true
FROM gone
HAVING sum(docs) <> 0 OR sum(length) <> 0
""")


async def compact_stats(conn: asyncpg.Connection, stores: int = 100) -> int:
    """Fold the statistics deltas of up to ``stores`` stores; returns how many."""
    fresh = await FRESH_STORES.fetch(conn, stores=stores)
    for workspace_id, store_id in fresh:
        async with conn.transaction():
            await compact_store(conn, workspace_id, store_id)
    return len(fresh)


async def compact_store(conn: asyncpg.Connection, workspace_id: str, store_id: str) -> None:
    """Fold one store's deltas: a lexeme no memory holds any more is gone from them."""
    await COMPACT_TERMS.execute(conn, workspace=workspace_id, store=store_id)
    await COMPACT_STORE_STATS.execute(conn, workspace=workspace_id, store=store_id)
