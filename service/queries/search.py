"""Retrieval for the search face: a vector arm and a full-text arm, fused.

Both arms run in one statement over one store, inside the caller's readability and the
request's filters. The vector arm ranks memories by their best vector (the memory's own,
or any chunk of a long text); the full-text arm ranks by ``ts_rank`` of an OR-query of
the question's lexemes (a conversational question rarely has every word in one memory).
Python fuses the two rank lists (``service.ranking``).

Small stores are searched exactly (every vector of the store is compared: at a few
thousand rows that is faster than an index and never misses); large ones go through
the HNSW indexes with pgvector 0.8's iterative scan, so a filtered search still returns
enough rows. The two are separate static statements, so a cached generic plan cannot
pick the wrong path for a store.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

import asyncpg
import numpy as np
import numpy.typing as npt
from pgvector import Vector

from service.queries.keys import Principal

# Below this many memories a store is scanned exactly.
EXACT_BELOW = 20_000
# BM25's corpus statistics come from at most this many rows of the store: exact for
# small stores, an estimate (mean length from a sample, N at least this) for large ones.
STATS_SAMPLE = 20_000

# The shared WHERE clause: store, liveness, readability, filters.
# $1 workspace, $2 store, $3 is_service, $4 member, $5 rooms, $6 categories, $7 tiers,
# $8 fact types, $9 scopes, $10 entities, $11 created_after, $12 created_before,
# $13 event_after, $14 event_before, $15 min_importance, $16 include_superseded,
# $17 speaker: NULL any, '' untagged excluded... see SPEAKER below, $18 exclude ids,
# $19 self: true = only speaker 'me', false = everything but 'me', NULL = all,
# $20 images: true = only image memories, false = no image memories, NULL = all.
_WHERE = """
m.workspace_id = $1 AND m.store_id = $2 AND m.status = 'active'
AND mneme_readable(m.scope, $3, $4, $5)
AND ($6::text[] IS NULL OR m.category = ANY($6::text[]))
AND ($7::text[] IS NULL OR m.tier = ANY($7::text[]))
AND ($8::text[] IS NULL OR m.fact_type = ANY($8::text[]))
AND ($9::text[] IS NULL OR m.scope = ANY($9::text[]))
AND ($10::text[] IS NULL OR m.entity_refs && $10::text[])
AND ($11::timestamptz IS NULL OR m.created_at > $11::timestamptz)
AND ($12::timestamptz IS NULL OR m.created_at < $12::timestamptz)
AND ($13::timestamptz IS NULL OR m.event_date > $13::timestamptz)
AND ($14::timestamptz IS NULL OR m.event_date < $14::timestamptz)
AND ($15::float8 IS NULL OR m.importance >= $15::float8)
AND ($16::boolean OR m.superseded_by IS NULL)
AND ($17::text IS NULL OR m.speaker = $17::text)
AND NOT (m.id = ANY($18::text[]))
AND ($19::boolean IS NULL OR (m.speaker IS NOT DISTINCT FROM 'me') = $19::boolean)
AND ($20::boolean IS NULL OR (m.kind = 'image') = $20::boolean)
"""

# $21 query vector, $22 query text, $23 candidates per arm
_SEARCH = """
WITH vec AS (
    SELECT id, max(sim) AS sim FROM (
        (SELECT m.id, 1 - (m.embedding <=> $21::vector) AS sim
         FROM memories m
         WHERE {where} AND m.embedding IS NOT NULL
         ORDER BY (m.embedding <=> $21::vector) {exact}
         LIMIT $23)
        UNION ALL
        (SELECT m.id, 1 - (c.embedding <=> $21::vector) AS sim
         FROM memory_chunks c
         JOIN memories m ON m.workspace_id = c.workspace_id AND m.id = c.memory_id
         WHERE {where}
         ORDER BY (c.embedding <=> $21::vector) {exact}
         LIMIT $23)
    ) hits
    GROUP BY id
    ORDER BY max(sim) DESC
    LIMIT $23
), terms AS (
    SELECT DISTINCT lexeme
    FROM unnest(tsvector_to_array(to_tsvector('english', $22::text))) AS lexeme
), tsq AS (
    -- NULL when the question has no lexemes: then the arm matches nothing.
    SELECT to_tsquery('english', nullif(array_to_string(array(
        SELECT quote_literal(lexeme) FROM terms
    ), ' | '), '')) AS q
), stats AS (
    -- Store size and mean length for BM25, over at most $24 rows (exact for small stores).
    SELECT greatest(count(*), 1)::float8 AS n, coalesce(avg(len), 1)::float8 AS avgdl
    FROM (SELECT length(m.search_tsv) AS len FROM memories m WHERE {where} LIMIT $24) s
), df AS (
    SELECT t.lexeme, count(*)::float8 AS df
    FROM terms t
    JOIN memories m ON m.search_tsv @@ quote_literal(t.lexeme)::tsquery
    WHERE {where}
    GROUP BY t.lexeme
), fts AS (
    -- BM25 (k1 = 1.2, b = 0.75): rare words weigh more than a name said in every turn.
    SELECT m.id,
           sum(ln(1 + (greatest(s.n, df.df) - df.df + 0.5) / (df.df + 0.5))
               * (x.tf * 2.2) / (x.tf + 1.2 * (0.25 + 0.75 * length(m.search_tsv) / s.avgdl)))
           AS rank
    FROM memories m
    CROSS JOIN tsq
    CROSS JOIN stats s
    CROSS JOIN LATERAL (
        SELECT u.lexeme, coalesce(cardinality(u.positions), 1) AS tf FROM unnest(m.search_tsv) u
    ) x
    JOIN df ON df.lexeme = x.lexeme
    WHERE {where} AND m.search_tsv @@ tsq.q
    GROUP BY m.id
    ORDER BY rank DESC, m.id
    LIMIT $23
), ids AS (
    SELECT id FROM vec UNION SELECT id FROM fts
)
SELECT m.id, m.text, m.kind, m.category, m.importance, m.proof_count, m.speaker,
       m.superseded_by, m.event_date, m.created_at, m.last_used_at,
       coalesce(vec.sim, CASE WHEN m.embedding IS NULL THEN NULL
                              ELSE 1 - (m.embedding <=> $21::vector) END) AS cosine,
       vec.sim IS NOT NULL AS in_vec, fts.rank AS fts_rank
FROM ids
JOIN memories m ON m.workspace_id = $1 AND m.id = ids.id
LEFT JOIN vec ON vec.id = ids.id
LEFT JOIN fts ON fts.id = ids.id
"""


def _statement(exact: bool) -> str:
    # "+ 0" makes the sort key an expression the HNSW index cannot serve: an exact scan.
    return _SEARCH.format(where=_WHERE, exact="+ 0" if exact else "")


SEARCH_EXACT = _statement(exact=True)
SEARCH_ANN = _statement(exact=False)

STORE_SIZE = """
SELECT count(*) FROM (
    SELECT 1 FROM memories WHERE workspace_id = $1 AND store_id = $2 LIMIT $3
) s
"""


@dataclass(frozen=True)
class SearchFilters:
    categories: list[str] | None = None
    tiers: list[str] | None = None
    fact_types: list[str] | None = None
    scopes: list[str] | None = None
    entities: list[str] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    event_after: datetime | None = None
    event_before: datetime | None = None
    min_importance: float | None = None
    include_superseded: bool = True


@dataclass(frozen=True)
class Candidate:
    id: str
    text: str
    kind: str
    category: str
    importance: float
    proof_count: int | None
    speaker: str | None
    superseded_by: str | None
    event_date: datetime | None
    created_at: datetime
    last_used_at: datetime
    cosine: float | None  # None: no vector yet
    in_vec: bool
    fts_rank: float | None


# (workspace, store) -> (small?, monotonic time it was measured). A store's size class
# changes slowly; counting up to EXACT_BELOW rows on every search would not be free.
_SIZE_CLASS: dict[tuple[str, str], tuple[bool, float]] = {}
SIZE_CLASS_TTL_S = 60.0


async def store_is_small(conn: asyncpg.Connection, workspace_id: str, store_id: str) -> bool:
    key = (workspace_id, store_id)
    known = _SIZE_CLASS.get(key)
    now = time.monotonic()
    if known is not None and now - known[1] < SIZE_CLASS_TTL_S:
        return known[0]
    count: int = await conn.fetchval(STORE_SIZE, workspace_id, store_id, EXACT_BELOW)
    _SIZE_CLASS[key] = (count < EXACT_BELOW, now)
    return count < EXACT_BELOW


async def candidates(
    conn: asyncpg.Connection,
    principal: Principal,
    store_id: str,
    query_vector: npt.NDArray[np.float32],
    query_text: str,
    filters: SearchFilters,
    *,
    exact: bool,
    per_arm: int,
    speaker: str | None = None,
    exclude: list[str] | None = None,
    self_only: bool | None = None,
    images: bool | None = None,
    use_fts: bool = True,
) -> list[Candidate]:
    """Both arms' candidates (unordered), for one store."""
    if not exact:
        # Filtered HNSW scans keep going until enough rows pass the filters.
        await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        await conn.execute(f"SET LOCAL hnsw.ef_search = {max(40, per_arm)}")
    rows = await conn.fetch(
        SEARCH_EXACT if exact else SEARCH_ANN,
        principal.workspace_id, store_id, principal.is_service, principal.member,
        principal.rooms, filters.categories, filters.tiers, filters.fact_types, filters.scopes,
        filters.entities, filters.created_after, filters.created_before, filters.event_after,
        filters.event_before, filters.min_importance, filters.include_superseded, speaker,
        exclude or [], self_only, images, Vector(query_vector),
        query_text if use_fts else "", per_arm, STATS_SAMPLE,
    )  # fmt: skip
    return [Candidate(*r) for r in rows]


TOUCH = """
UPDATE memories SET last_used_at = now()
WHERE workspace_id = $1 AND id = ANY($2::text[]) AND last_used_at < now()
"""


async def touch(conn: asyncpg.Connection | asyncpg.Pool, workspace_id: str, ids: list[str]) -> None:
    """``last_used_at = now()`` for memories a search returned."""
    await conn.execute(TOUCH, workspace_id, ids)
