"""A small store's searchable rows, read at one store version, and the statement that
checks candidates proposed from them.

``load`` reads, in one repeatable-read transaction, the store's version and every active
memory's search columns: what a search candidate carries, its scope, its vector (and its
chunks' vectors), its lexemes with their counts. ``readable`` keeps those of a list of ids
that pass the full search predicate (readability, filters, liveness) in SQL, as the SQL
arms apply it (service.retrieval.snapshots uses it when a search has filters).

Vectors travel as ``vector_send``'s bytes: numpy reads them all in one pass, where
pgvector's codec would build one array per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
import numpy as np
import numpy.typing as npt

from service.ops.db import VECTOR_DIMENSION
from service.queries.memories import LAST_USED_AT
from service.queries.named import NamedSQL
from service.queries.search import _WHERE, SUBSETS

# vector_send: int16 dimension, int16 unused, then the floats big-endian; 4 header bytes
# are one float's width, so a row is dimension + 1 floats.
_ROW_FLOATS = VECTOR_DIMENSION + 1
_ZERO = f"array_fill(0::real, ARRAY[{VECTOR_DIMENSION}])::vector"

VERSION = NamedSQL("""
SELECT coalesce(
    (SELECT version FROM store_versions WHERE workspace_id = :workspace AND store_id = :store), 0
)
""")

# The versions of the stores whose snapshots a process holds (its sweep: a store changed
# since, by an erasure too, has its snapshot dropped at once).
VERSIONS = NamedSQL("""
SELECT s.workspace_id, s.store_id, coalesce(v.version, 0) AS version
FROM unnest(:workspaces::text[], :stores::text[]) AS s(workspace_id, store_id)
LEFT JOIN store_versions v ON v.workspace_id = s.workspace_id AND v.store_id = s.store_id
""")


async def versions(
    conn: asyncpg.Connection, keys: list[tuple[str, str]]
) -> dict[tuple[str, str], int]:
    """Each (workspace, store)'s version now, as ``load`` reads it."""
    rows = await VERSIONS.fetch(conn, workspaces=[k[0] for k in keys], stores=[k[1] for k in keys])
    return {(r["workspace_id"], r["store_id"]): int(r["version"]) for r in rows}


# A search candidate's columns (service.queries.search.Candidate's fields, in order, but
# for what ranking adds), as ROWS and FETCH both begin; service.retrieval.snapshots reads them by
# position.
CANDIDATE_COLUMNS = f"""
m.id, m.text, m.kind, m.category, m.importance, m.proof_count, m.speaker, m.superseded_by,
m.event_date, m.created_at, {LAST_USED_AT} AS last_used_at, m.text_tokens, m.written_after
"""

# Rows in id order; their position in it is the row number every other part refers to.
ROWS = NamedSQL(f"""
SELECT {CANDIDATE_COLUMNS}, m.scope, m.embedding IS NOT NULL AS has_vector,
       length(m.search_tsv) AS length,
       vector_send(coalesce(m.embedding, {_ZERO})) AS vector
FROM memories m
WHERE m.workspace_id = :workspace AND m.store_id = :store AND m.status = 'active'
ORDER BY m.id
""")

_NUMBERED = """
WITH r AS (
    SELECT (row_number() OVER (ORDER BY id) - 1)::int AS i, id, search_tsv, chunked
    FROM memories
    WHERE workspace_id = :workspace AND store_id = :store AND status = 'active'
)
"""

# Each lexeme's postings: the rows it occurs in and how often (BM25's tf, as the full-text
# arm counts it: the number of positions).
POSTINGS = NamedSQL(f"""{_NUMBERED}
SELECT u.lexeme, array_agg(r.i ORDER BY r.i) AS rows,
       array_agg(cardinality(u.positions) ORDER BY r.i) AS tfs
FROM r, unnest(r.search_tsv) u
GROUP BY u.lexeme
""")

CHUNKS = NamedSQL(f"""{_NUMBERED}
SELECT coalesce(array_agg(r.i ORDER BY r.i, c.chunk_index), '{{}}') AS rows,
       coalesce(string_agg(vector_send(c.embedding), ''::bytea ORDER BY r.i, c.chunk_index),
                ''::bytea) AS vectors
FROM r JOIN memory_chunks c ON c.workspace_id = :workspace AND c.memory_id = r.id
WHERE r.chunked
""")


@dataclass(frozen=True)
class Columns:
    """What ``load`` read: row ``i`` of every part is the memory ``rows[i]``."""

    version: int
    rows: list[asyncpg.Record]  # ROWS' columns
    vectors: npt.NDArray[np.float32]  # (rows, dimension); zeros where it has no vector yet
    postings: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]]
    chunk_rows: npt.NDArray[np.int64]
    chunk_vectors: npt.NDArray[np.float32]


def _vectors(blob: bytes) -> npt.NDArray[np.float32]:
    floats = np.frombuffer(blob, dtype=">f4").reshape(-1, _ROW_FLOATS)[:, 1:]
    return np.ascontiguousarray(floats, dtype=np.float32)


async def load(conn: asyncpg.Connection, workspace_id: str, store_id: str) -> Columns:
    """The store's columns and the version they are exact for."""
    names = {"workspace": workspace_id, "store": store_id}
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        version = await conn.fetchval(VERSION.sql, *VERSION.args(names))
        rows = await conn.fetch(ROWS.sql, *ROWS.args(names))
        postings = await conn.fetch(POSTINGS.sql, *POSTINGS.args(names))
        chunks = await conn.fetchrow(CHUNKS.sql, *CHUNKS.args(names))
    assert chunks is not None
    return Columns(
        version=int(version),
        rows=rows,
        vectors=_vectors(b"".join(r["vector"] for r in rows)),
        postings={
            p["lexeme"]: (np.array(p["rows"], dtype=np.int64), np.array(p["tfs"], dtype=np.float64))
            for p in postings
        },
        chunk_rows=np.array(chunks["rows"], dtype=np.int64),
        chunk_vectors=_vectors(chunks["vectors"]),
    )


# The rows of the proposed candidates that pass the search predicate (readability,
# filters, liveness), with what ranking reads of them. OFFSET 0 keeps the predicate out of
# the primary-key probe.
_FETCH = """
SELECT {columns}
FROM unnest(:ids::text[]) AS p(id)
CROSS JOIN LATERAL (
    SELECT * FROM memories m WHERE m.workspace_id = :workspace AND m.id = p.id OFFSET 0
) m
WHERE {where}
"""

FETCH = {
    subset: NamedSQL(_FETCH.format(where=_WHERE + extra, columns=CANDIDATE_COLUMNS))
    for subset, extra in SUBSETS.items()
}


async def readable(
    conn: asyncpg.Connection, subset: str, values: dict[str, object], ids: list[str]
) -> dict[str, asyncpg.Record]:
    """The rows of ``ids`` that pass the search predicate (``values``: the retrieval's, as
    ``service.queries.search.statement_values`` makes them), by id."""
    statement = FETCH[subset]
    given = {**values, "ids": ids}
    rows = await conn.fetch(
        statement.sql, *statement.args({n: v for n, v in given.items() if n in statement.names})
    )
    return {r[0]: r for r in rows}
