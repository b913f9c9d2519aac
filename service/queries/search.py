"""Retrieval for the search face: a vector arm and a full-text arm, fused.

Both arms run in one statement over one store, inside the caller's readability and the
request's filters. The vector arm ranks memories by their best vector (the memory's own,
or any chunk of a long text); the full-text arm ranks by BM25 over an OR-query of the
question's lexemes (a conversational question rarely has every word in one memory),
with the store's statistics (document count, mean length, each lexeme's document
frequency) read from tables that triggers keep exact (0003_search_stats.sql). Python
fuses the two rank lists (``service.retrieval.ranking``).

Small stores are searched exactly (every vector of the store is compared: at a few
thousand rows that is faster than an index and never misses); large ones go through
the HNSW indexes with pgvector 0.8's iterative scan, falling back to the exact scan when
a filtered scan brings too few rows. The variants are separate static statements, so a
cached generic plan cannot pick the wrong path for a store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime

import asyncpg
import numpy as np
import numpy.typing as npt
from pgvector import Vector

from service.queries import Conn
from service.queries.keys import Principal
from service.queries.memories import LAST_USED_AT, SELECT_STORE, Store
from service.queries.named import NamedSQL

# Below this many memories (in the part of the store searched) a store is scanned exactly.
EXACT_BELOW = 20_000

# The shared WHERE clause: store, liveness, readability, filters (NULL: not filtered).
# :speaker NULL = any; :self_only true = only speaker 'me', false = everything but 'me',
# NULL = all; :images true = only image memories, false = none, NULL = all.
_WHERE = """
m.workspace_id = :workspace AND m.store_id = :store AND m.status = 'active'
AND mneme_readable(m.scope, :is_service, :member, :rooms)
AND (:categories::text[] IS NULL OR m.category = ANY(:categories::text[]))
AND (:tiers::text[] IS NULL OR m.tier = ANY(:tiers::text[]))
AND (:fact_types::text[] IS NULL OR m.fact_type = ANY(:fact_types::text[]))
AND (:scopes::text[] IS NULL OR m.scope = ANY(:scopes::text[]))
AND (:entities::text[] IS NULL OR m.entity_refs && :entities::text[])
AND (:created_after::timestamptz IS NULL OR m.created_at > :created_after::timestamptz)
AND (:created_before::timestamptz IS NULL OR m.created_at < :created_before::timestamptz)
AND (:event_after::timestamptz IS NULL OR m.event_date > :event_after::timestamptz)
AND (:event_before::timestamptz IS NULL OR m.event_date < :event_before::timestamptz)
AND (:min_importance::float8 IS NULL OR m.importance >= :min_importance::float8)
AND (:include_superseded::boolean OR m.superseded_by IS NULL)
AND (:speaker::text IS NULL OR m.speaker = :speaker::text)
AND (:self_only::boolean IS NULL OR (m.speaker IS NOT DISTINCT FROM 'me') = :self_only::boolean)
AND (:images::boolean IS NULL OR (m.kind = 'image') = :images::boolean)
"""

# The two arms are two statements: the full-text arm needs no vector, so it runs while the
# model encodes the question (service.retrieval.retrieve), and the vector arm, once the
# vector is there, also reads the columns of every candidate of both arms.

# BM25's constants, for the full-text arm's SQL and the snapshots' numpy alike
# (service.retrieval.snapshots): term-frequency saturation and length normalisation.
BM25_K1, BM25_B = 1.2, 0.75
BM25_TERMS = {"k1": BM25_K1, "k1_plus_1": BM25_K1 + 1, "b": BM25_B, "one_minus_b": 1 - BM25_B}

# The full-text arm. :per_arm candidates; :docs memories in the store, :avgdl their mean
# length (BM25); :budget the arm's posting budget (see MATCH_BUDGET); :max_terms the most
# lexemes of the question it matches and scores on (MAX_QUERY_TERMS).
_TEXT = """
WITH terms AS (
    -- The question's lexemes that occur in the store, with their document frequency: the
    -- :max_terms rarest (MAX_QUERY_TERMS), byte order breaking ties as Python's does.
    SELECT t.lexeme, sum(t.df)::float8 AS df
    FROM search_terms t
    WHERE t.workspace_id = :workspace AND t.store_id = :store
      AND t.lexeme = ANY(tsvector_to_array(to_tsvector('english', :query_text::text)))
    GROUP BY t.lexeme
    HAVING sum(t.df) > 0
    ORDER BY sum(t.df), t.lexeme COLLATE "C"
    LIMIT :max_terms
), tsq AS (
    -- Memories are matched on the rarest lexemes whose postings fit the budget (always
    -- the rarest one); common ones only add to the score of what matched. NULL when no
    -- lexeme occurs in the store: then the arm matches nothing.
    SELECT array_to_string(array(
        SELECT quote_literal(lexeme) FROM (
            SELECT lexeme, sum(df) OVER (ORDER BY df, lexeme) AS postings,
                   row_number() OVER (ORDER BY df, lexeme) AS n
            FROM terms
        ) ranked
        WHERE postings <= :budget OR n = 1
    ), ' | ')::tsquery AS q,
    array(SELECT lexeme FROM terms) AS lexemes
    WHERE EXISTS (SELECT 1 FROM terms)
)
-- BM25 (BM25_K1, BM25_B): rare words weigh more than a name said in every turn.
-- Scored row by row (LATERAL), after the match: each matched memory is read once.
-- Only the question's lexemes are unnested: setweight marks them, ts_filter keeps
-- them (search_tsv is to_tsvector's: every lexeme has positions, all of weight D),
-- a fifth of the cost of unnesting the whole document.
SELECT m.id, score.rank
FROM tsq
JOIN memories m ON m.search_tsv @@ tsq.q
CROSS JOIN LATERAL (
    SELECT sum(ln(1 + (greatest(:docs::float8, t.df) - t.df + 0.5) / (t.df + 0.5))
               * (x.tf * {k1_plus_1})
               / (x.tf + {k1} * ({one_minus_b} + {b} * length(m.search_tsv) / :avgdl::float8)))
           AS rank
    FROM (
        SELECT u.lexeme, cardinality(u.positions) AS tf
        FROM unnest(ts_filter(setweight(m.search_tsv, 'A', tsq.lexemes), '{{a}}')) u
    ) x
    JOIN terms t ON t.lexeme = x.lexeme
) score
WHERE {where}
ORDER BY score.rank DESC, m.id
LIMIT :per_arm
"""

# The vector arm, and the columns of its candidates and of the full-text arm's
# (:text_ids, checked against the filters again: the store may have changed since).
_VECTOR = """
WITH vec AS (
    SELECT id, max(sim) AS sim FROM (
        (SELECT m.id, 1 - (m.embedding <=> :query_vector::vector) AS sim
         FROM memories m
         WHERE {where} AND m.embedding IS NOT NULL
         ORDER BY (m.embedding <=> :query_vector::vector) {exact}
         LIMIT :per_arm)
        UNION ALL
        (SELECT m.id, 1 - (c.embedding <=> :query_vector::vector) AS sim
         FROM memory_chunks c
         JOIN memories m ON m.workspace_id = c.workspace_id AND m.id = c.memory_id
         WHERE {where} AND m.chunked
         ORDER BY (c.embedding <=> :query_vector::vector) {exact}
         LIMIT :per_arm)
    ) hits
    GROUP BY id
    ORDER BY max(sim) DESC
    LIMIT :per_arm
), ids AS (
    SELECT id FROM vec UNION SELECT unnest(:text_ids::text[])
)
SELECT m.id, m.text, m.kind, m.category, m.importance, m.proof_count, m.speaker,
       m.superseded_by, m.event_date, m.created_at, {last_used_at} AS last_used_at,
       coalesce(vec.sim, CASE WHEN m.embedding IS NULL THEN NULL
                              ELSE 1 - (m.embedding <=> :query_vector::vector) END) AS cosine,
       vec.sim IS NOT NULL AS in_vec, m.text_tokens, m.written_after
FROM ids
-- One primary-key probe per candidate, whatever the planner believes of the store's size
-- (without statistics it hashed the whole store instead, 2.7 ms at 663 rows; or walked the
-- store's index once per candidate). OFFSET 0 keeps the filters out of the probe.
CROSS JOIN LATERAL (
    SELECT * FROM memories m WHERE m.workspace_id = :workspace AND m.id = ids.id OFFSET 0
) m
LEFT JOIN vec ON vec.id = ids.id
WHERE {where}
"""

# What part of the store a retrieval searches. "self" and "images" are spelled out as
# literals so the partial indexes memories_self and memories_images serve them.
SUBSETS = {
    "all": "",
    "self": " AND m.speaker = 'me'",
    "images": " AND m.kind = 'image'",
}


@dataclass(frozen=True)
class ArmStatements:
    """The two statements of one retrieval: the full-text arm, then the vector arm."""

    text: NamedSQL
    vector: NamedSQL


def _arm_statements(exact: bool, subset: str) -> ArmStatements:
    where = _WHERE + SUBSETS[subset]
    return ArmStatements(
        NamedSQL(_TEXT.format(where=where, **BM25_TERMS)),
        NamedSQL(
            _VECTOR.format(
                where=where,
                # "+ 0" makes the sort key an expression the HNSW index cannot serve: an exact
                # scan.
                exact="+ 0" if exact else "",
                last_used_at=LAST_USED_AT,
            )
        ),
    )


STATEMENTS = {
    (exact, subset): _arm_statements(exact, subset) for exact in (True, False) for subset in SUBSETS
}

# The full-text arm of a large store matches memories on its rarest query words until
# their document frequencies add up to this many (see the tsq step); a small store's
# arm matches every query word.
MATCH_BUDGET = 1_500
UNBOUNDED = 2**62
# The full-text arm matches and scores on at most this many of the question's lexemes, the
# rarest in the store (the snapshots' arm too): a question is a few words, and a pasted
# page of them would otherwise match, and score, most of a large store (measured: 1.8 s
# at 21,000 memories for 300 distinct words, unbounded).
MAX_QUERY_TERMS = 32


@dataclass(frozen=True)
class Profile:
    """A store's search statistics (exact: kept by triggers, see 0003_search_stats.sql)."""

    docs: int
    length: int
    self_docs: int
    image_docs: int
    # What the search asked along with the profile (service.retrieval.snapshots): the query's
    # lexemes (to_tsvector's, as the full-text arm takes them), and which of the scopes it
    # named the reader may read (mneme_readable).
    lexemes: tuple[str, ...] = ()
    readable_scopes: frozenset[str] = frozenset()
    # The version of the store's set of registered speakers (0027_speakers_version.sql): the
    # speaker a query names is matched against that set (service.retrieval.speaker_names).
    speakers_version: int = 0

    @property
    def avgdl(self) -> float:
        return max(1.0, self.length / max(1, self.docs))

    def size(self, subset: str) -> int:
        return {"all": self.docs, "self": self.self_docs, "images": self.image_docs}[subset]


# A search's store (by id or name, as memories.resolve_store) and its profile: one round trip.
STORE_AND_PROFILE = NamedSQL(f"""
SELECT s.*, p.*, tsvector_to_array(to_tsvector('english', :query::text)) AS lexemes,
       array(SELECT x FROM unnest(:scopes::text[]) x
             WHERE mneme_readable(x, :is_service, :member, :rooms)) AS readable_scopes,
       coalesce((SELECT v.speakers_version FROM store_versions v
                 WHERE v.workspace_id = :workspace AND v.store_id = s.id), 0) AS speakers_version
FROM ({SELECT_STORE}) s
CROSS JOIN LATERAL (
    SELECT coalesce(sum(docs), 0)::bigint AS docs, coalesce(sum(length), 0)::bigint AS length,
           coalesce(sum(self_docs), 0)::bigint AS self_docs,
           coalesce(sum(image_docs), 0)::bigint AS image_docs
    FROM search_store_stats
    WHERE workspace_id = :workspace AND store_id = s.id
) p
""")


async def store_and_profile(
    conn: Conn,
    workspace_id: str,
    ref: str,
    query: str = "",
    *,
    reader: Principal | None = None,
    scopes: Sequence[str] = (),
) -> tuple[Store, Profile] | None:
    """The store ``ref`` names and its profile; with it, ``query``'s lexemes and which of
    ``scopes`` ``reader`` may read."""
    is_service, member, rooms = (
        (False, None, []) if reader is None else (reader.is_service, reader.member, reader.rooms)
    )
    row = await STORE_AND_PROFILE.fetchrow(
        conn,
        workspace=workspace_id,
        ref=ref,
        query=query,
        scopes=list(scopes),
        is_service=is_service,
        member=member,
        rooms=rooms,
    )
    if row is None:
        return None
    store = Store(**{f.name: row[f.name] for f in fields(Store)})
    asked = ("lexemes", "readable_scopes")
    profile = Profile(
        **{f.name: row[f.name] for f in fields(Profile) if f.name not in asked},
        lexemes=tuple(row["lexemes"]),
        readable_scopes=frozenset(row["readable_scopes"]),
    )
    return store, profile


# A store's registered speakers, with the version of that set they are as of (one
# statement: the list and its version from the same view).
SPEAKER_SET = NamedSQL("""
SELECT coalesce((SELECT v.speakers_version FROM store_versions v
                 WHERE v.workspace_id = :workspace AND v.store_id = :store), 0) AS version,
       array(SELECT sp.name FROM speakers sp
             WHERE sp.workspace_id = :workspace AND sp.store_id = :store) AS names
""")


async def speaker_set(conn: Conn, workspace_id: str, store_id: str) -> tuple[int, list[str]]:
    """The store's registered speakers (``me`` is not one) and the version of that set."""
    row = await SPEAKER_SET.fetchrow(conn, workspace=workspace_id, store=store_id)
    assert row is not None  # a SELECT without FROM: always one row
    return row["version"], list(row["names"])


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


# Not frozen: a search builds a hundred or so per retrieval, and a frozen dataclass takes
# ten times as long to build (1.4 against 0.14 µs). Nothing changes one once built.
@dataclass(slots=True)
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
    text_tokens: int | None = None  # None: not counted yet (the worker counts them)
    # The memory written right before it in its store and scope (0013_written_after.sql).
    written_after: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RetrievalRequest:
    """One retrieval: whose, from which store, of what, and how deep. ``vector`` may be
    missing while only the full-text arm is asked for; ``use_fts`` false leaves that arm
    out; ``exact`` ``None``: an exact scan below ``EXACT_BELOW`` memories, else HNSW."""

    principal: Principal
    store_id: str
    profile: Profile
    query_text: str
    vector: npt.NDArray[np.float32] | None
    filters: SearchFilters
    per_arm: int
    subset: str = "all"
    speaker: str | None = None
    self_only: bool | None = None
    images: bool | None = None
    use_fts: bool = True
    exact: bool | None = None


def predicate_values(retrieval: RetrievalRequest) -> dict[str, object]:
    """The parameters of the search predicate (_WHERE), by name."""
    principal, filters = retrieval.principal, retrieval.filters
    return {
        "workspace": principal.workspace_id,
        "store": retrieval.store_id,
        "is_service": principal.is_service,
        "member": principal.member,
        "rooms": principal.rooms,
        "categories": filters.categories,
        "tiers": filters.tiers,
        "fact_types": filters.fact_types,
        "scopes": filters.scopes,
        "entities": filters.entities,
        "created_after": filters.created_after,
        "created_before": filters.created_before,
        "event_after": filters.event_after,
        "event_before": filters.event_before,
        "min_importance": filters.min_importance,
        "include_superseded": filters.include_superseded,
        "speaker": retrieval.speaker,
        "self_only": retrieval.self_only,
        "images": retrieval.images,
    }


def statement_values(retrieval: RetrievalRequest, *, budget: int) -> dict[str, object]:
    """The parameters of a retrieval's statements, by name (see _WHERE, _TEXT and
    _VECTOR); each statement takes those it names."""
    vector, profile = retrieval.vector, retrieval.profile
    return {
        **predicate_values(retrieval),
        "query_vector": None if vector is None else Vector(vector),
        "query_text": retrieval.query_text if retrieval.use_fts else "",
        "per_arm": retrieval.per_arm,
        "docs": float(profile.docs),
        "avgdl": profile.avgdl,
        "budget": budget,
        "max_terms": MAX_QUERY_TERMS,
    }


def planned_once(profile: Profile) -> bool:
    """Whether a search of the store may run on generic plans: its statements are the
    exact ones, whose plans never depend on the store (service.ops.db.PLANNED_ONCE_SETTINGS),
    unlike the HNSW statements."""
    return profile.docs < EXACT_BELOW


async def text_ranks(
    conn: asyncpg.Connection, statements: ArmStatements, values: dict[str, object]
) -> dict[str, float]:
    """The full-text arm: memory id -> BM25 score (nothing when the query is empty)."""
    if not values["query_text"]:
        return {}
    rows = await statements.text.fetch_among(conn, values)
    return {r[0]: r[1] for r in rows}


async def with_vectors(
    conn: asyncpg.Connection,
    statements: ArmStatements,
    values: dict[str, object],
    ranks: dict[str, float],
) -> list[Candidate]:
    """The vector arm, and every candidate of both arms (``ranks``: the full-text arm's)."""
    rows = await statements.vector.fetch_among(conn, {**values, "text_ids": list(ranks)})
    return [Candidate(fts_rank=ranks.get(r[0]), **dict(r.items())) for r in rows]


async def candidates(
    conn: asyncpg.Connection,
    retrieval: RetrievalRequest,
    ranks: dict[str, float] | None = None,
) -> list[Candidate]:
    """Both arms' candidates (unordered), for one store. ``ranks``: the full-text arm's,
    when they were already asked for (``plan``/``text_ranks``).

    Fewer than ``EXACT_BELOW`` memories in the searched part of the store: an exact scan
    (at that size faster than the index, and it never misses). More: the HNSW index with
    pgvector's iterative scan (settings in ``service.ops.db``); if that still brings fewer
    vector candidates than asked for (a filter that passes few rows, the scan's tuple
    limit), the exact scan answers the vector arm instead, so a filtered search never
    silently loses results. The full-text arm does not depend on the index: its candidates
    stand, within its match budget (matching every word of the question again, unbounded,
    cost as much as the store and the question were long: 1.8 s at 21,000 memories).
    """
    assert retrieval.vector is not None
    statements, values = plan(retrieval)
    if ranks is None:
        ranks = await text_ranks(conn, statements, values)
    found = await with_vectors(conn, statements, values, ranks)
    subset = retrieval.subset
    if statements is STATEMENTS[False, subset] and sum(c.in_vec for c in found) < retrieval.per_arm:
        found = await with_vectors(conn, STATEMENTS[True, subset], values, ranks)
    return found


def plan(retrieval: RetrievalRequest) -> tuple[ArmStatements, dict[str, object]]:
    """Which statements a retrieval runs, and their values."""
    exact = retrieval.exact
    if exact is None:
        exact = retrieval.profile.size(retrieval.subset) < EXACT_BELOW
    values = statement_values(retrieval, budget=UNBOUNDED if exact else MATCH_BUDGET)
    return STATEMENTS[exact, retrieval.subset], values
