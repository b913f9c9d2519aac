"""A large store's own HNSW index (service/retrieval/store_indexes.py): built when a store grows
past the line, walked by that store's searches, dropped when it is no longer needed, one
builder at a time, and a build cut short is built again."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import numpy as np
import numpy.typing as npt
import pytest

from service.ops import db
from service.queries import search as sq, tenancy
from service.queries.keys import Principal
from service.queries.memories import Store
from service.queries.search import SearchFilters
from service.retrieval import store_indexes
from service.settings import Settings
from tests.helpers import Client

INSERT = """
INSERT INTO memories (workspace_id, id, store_id, text, scope, provider, provider_ref,
                      content_sha256, content_size_bytes, embedding, embedding_model,
                      embedding_status)
SELECT $1, $2 || to_char(g, 'FM0000'), $3, 'memory number ' || g, 'workspace', 'test',
       $2 || g, md5($2 || g), 16, v::vector, 'test', 'ready'
FROM unnest($4::text[]) WITH ORDINALITY AS x(v, g)
"""
Vectors = npt.NDArray[np.float32]
OWN = "SELECT index_name, built_at FROM store_vector_indexes WHERE store_id = $1"
INDEXDEF = "SELECT indexdef FROM pg_indexes WHERE indexname = $1"


async def _stores(conn: asyncpg.Connection) -> tuple[str, str, str]:
    """A workspace with its default store and one more (no service running: its janitor
    would be a second builder)."""
    workspace = await tenancy.create_workspace(conn, "indexed", "scale")
    assert workspace is not None
    ws = workspace.id
    default = await conn.fetchval(
        "SELECT id FROM stores WHERE workspace_id = $1 AND name = 'default'", ws
    )
    other = "memstore_other"
    await conn.execute(
        "INSERT INTO stores (workspace_id, id, name) VALUES ($1, $2, 'other')", ws, other
    )
    return ws, default, other


def _vectors(n: int, seed: int) -> Vectors:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


async def _fill(conn: asyncpg.Connection, ws: str, store: str, prefix: str, n: int) -> Vectors:
    vectors = _vectors(n, seed=len(prefix) + n)
    await conn.execute(INSERT, ws, prefix, store, [str(v.tolist()) for v in vectors])
    return vectors


async def _plan(conn: asyncpg.Connection, who: Principal, store: str, query: Vectors) -> str:
    found = await sq.store_and_profile(conn, who.workspace_id, store)
    assert found is not None
    retrieval = sq.RetrievalRequest(
        principal=who,
        store_id=store,
        profile=found[1],
        query_text="",
        vector=query,
        filters=SearchFilters(),
        per_arm=20,
    )
    values = sq.statement_values(retrieval, budget=sq.MATCH_BUDGET)
    statement = sq.STATEMENTS[False, "all"].vector
    rows = await conn.fetch(
        "EXPLAIN (COSTS OFF) " + statement.sql,
        *statement.args_among({**values, "text_ids": []}),
    )
    return "\n".join(r[0] for r in rows)


async def test_a_large_store_gets_its_own_index_and_its_searches_walk_it(db_url: str) -> None:
    pool = await db.create_pool(db_url, Settings(database_url=db_url, pool_min=1, pool_max=2))
    try:
        async with pool.acquire() as conn:
            ws, big, small = await _stores(conn)
            vectors = await _fill(conn, ws, big, "mem_big", 300)
            await _fill(conn, ws, small, "mem_small", 40)
            await conn.execute("ANALYZE memories")
            who = Principal("k", ws, "scale", "service", None, frozenset(), [])

            changes = await store_indexes.reconcile(db_url, 200)
            name = store_indexes.index_name(ws, big)
            assert changes == store_indexes.Changes(built=[name], dropped=[])
            own = await conn.fetchrow(OWN, big)
            assert own["index_name"] == name and own["built_at"] is not None
            indexdef = await conn.fetchval(INDEXDEF, name)
            assert "USING hnsw (embedding vector_cosine_ops)" in indexdef
            assert f"store_id = '{big}'" in indexdef and f"workspace_id = '{ws}'" in indexdef
            assert await conn.fetchval(
                "SELECT indisvalid FROM pg_index WHERE indexrelid = $1::regclass", name
            )
            assert await conn.fetchrow(OWN, small) is None  # 40 < 200

            # The big store's HNSW statement walks its own index; the small one's cannot.
            assert f"Index Scan using {name} " in await _plan(conn, who, big, vectors[0])
            assert name not in await _plan(conn, who, small, vectors[0])
            # And answers as the exact scan does (300 vectors: the walk misses nothing).
            found = await sq.store_and_profile(conn, ws, big)
            assert found is not None
            for query in vectors[:5]:
                served, exact = [
                    await sq.candidates(conn, sq.RetrievalRequest(
                        principal=who, store_id=big, profile=found[1], query_text="",
                        vector=query, filters=SearchFilters(), per_arm=10, exact=exact,
                    ))
                    for exact in (False, True)
                ]  # fmt: skip
                assert [c.id for c in served] == [c.id for c in exact]

            # Nothing more to do on the next pass.
            assert await store_indexes.reconcile(db_url, 200) == store_indexes.Changes([], [])
    finally:
        await pool.close()


async def test_a_store_that_shrinks_below_half_or_is_deleted_loses_its_index(
    conn: asyncpg.Connection, db_url: str
) -> None:
    ws, big, other = await _stores(conn)
    await _fill(conn, ws, big, "mem_big", 60)
    await _fill(conn, ws, other, "mem_oth", 60)
    built = await store_indexes.reconcile(db_url, 50)
    assert built is not None and len(built.built) == 1  # one build per pass
    built = await store_indexes.reconcile(db_url, 50)
    assert built is not None and len(built.built) == 1
    names = {s: store_indexes.index_name(ws, s) for s in (big, other)}
    assert all([await conn.fetchval(INDEXDEF, n) for n in names.values()])

    # 60 -> 30: above half of 50, kept (no drop and build again at the line).
    await conn.execute("DELETE FROM memories WHERE store_id = $1 AND id > 'mem_big0030'", big)
    assert await store_indexes.reconcile(db_url, 50) == store_indexes.Changes([], [])
    # 30 -> 20: below half, dropped.
    await conn.execute("DELETE FROM memories WHERE store_id = $1 AND id > 'mem_big0020'", big)
    assert await store_indexes.reconcile(db_url, 50) == store_indexes.Changes([], [names[big]])
    assert await conn.fetchval(INDEXDEF, names[big]) is None
    assert await conn.fetchrow(OWN, big) is None

    await conn.execute("DELETE FROM stores WHERE id = $1", other)
    assert await store_indexes.reconcile(db_url, 50) == store_indexes.Changes([], [names[other]])
    assert await conn.fetchval(INDEXDEF, names[other]) is None
    assert await conn.fetchval("SELECT count(*) FROM store_vector_indexes") == 0


async def test_turning_the_feature_off_drops_every_own_index(
    conn: asyncpg.Connection, db_url: str
) -> None:
    ws, big, _ = await _stores(conn)
    await _fill(conn, ws, big, "mem_big", 30)
    name = store_indexes.index_name(ws, big)
    assert not await store_indexes.due(conn, 0) and not await store_indexes.due(conn, 50)
    assert await store_indexes.due(conn, 20)  # the pass opens its own connection only now
    assert await store_indexes.reconcile(db_url, 20) == store_indexes.Changes([name], [])
    assert not await store_indexes.due(conn, 20)
    assert await store_indexes.due(conn, 0)  # off: the index is to be dropped
    assert await store_indexes.reconcile(db_url, 0) == store_indexes.Changes([], [name])
    assert not await store_indexes.due(conn, 0)
    assert await conn.fetchval(INDEXDEF, name) is None


async def test_a_build_cut_short_is_dropped_and_built_again(
    conn: asyncpg.Connection, db_url: str
) -> None:
    """A builder that died mid-build left its row unstamped and an index of that name
    (whatever state it is in): the next pass drops it and builds the real one."""
    ws, big, _ = await _stores(conn)
    await _fill(conn, ws, big, "mem_big", 30)
    name = store_indexes.index_name(ws, big)
    await conn.execute(
        "INSERT INTO store_vector_indexes (workspace_id, store_id, index_name) VALUES ($1, $2, $3)",
        ws, big, name,
    )  # fmt: skip
    await conn.execute(f"CREATE INDEX {name} ON memories (id)")
    assert await store_indexes.reconcile(db_url, 20) == store_indexes.Changes([name], [])
    assert "USING hnsw" in await conn.fetchval(INDEXDEF, name)
    assert (await conn.fetchrow(OWN, big))["built_at"] is not None


async def test_one_instance_builds_at_a_time(conn: asyncpg.Connection, db_url: str) -> None:
    ws, big, _ = await _stores(conn)
    await _fill(conn, ws, big, "mem_big", 30)
    holder = await asyncpg.connect(db_url)
    try:
        assert await holder.fetchval("SELECT pg_try_advisory_lock($1)", store_indexes.BUILDER_LOCK)
        assert await store_indexes.reconcile(db_url, 20) is None  # another is at it
        assert await conn.fetchrow(OWN, big) is None
    finally:
        await holder.close()  # as a builder that dies: its lock goes with its connection
    assert await store_indexes.reconcile(db_url, 20) == store_indexes.Changes(
        [store_indexes.index_name(ws, big)], []
    )


async def test_the_service_builds_the_index_of_a_store_past_the_line(
    make_client: Callable[[Settings], Awaitable[Client]],
    settings: Settings,
    conn: asyncpg.Connection,
) -> None:
    ws, big, _ = await _stores(conn)
    await _fill(conn, ws, big, "mem_big", 30)
    await make_client(dataclasses.replace(settings, store_index_min=20))
    for _ in range(100):  # the first pass runs at start-up
        own = await conn.fetchrow(OWN, big)
        if own is not None and own["built_at"] is not None:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the janitor built no index for the store")
    assert await conn.fetchval(INDEXDEF, store_indexes.index_name(ws, big))


WRITE = """
INSERT INTO memories (workspace_id, id, store_id, text, scope, provider, provider_ref,
                      content_sha256, content_size_bytes, category, embedding, embedding_model,
                      embedding_status)
SELECT $1, 'mem_w' || to_char(g, 'FM0000'), $2, t, 'workspace', 'test', 'w' || g, md5(t), 16,
       c, v::vector, 'test', 'ready'
FROM unnest($3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS x(t, c, v, g)
"""


async def _write(
    conn: asyncpg.Connection, ws: str, store: str, texts: list[str], categories: list[str]
) -> None:
    vectors = [str(v.tolist()) for v in _vectors(len(texts), seed=len(texts))]
    await conn.execute(WRITE, ws, store, texts, categories, vectors)


def _retrieval(
    who: Principal, store: str, found: tuple[Store, sq.Profile], query: str, **extra: Any
) -> sq.RetrievalRequest:
    return sq.RetrievalRequest(
        principal=who, store_id=store, profile=found[1], query_text=query,
        vector=_vectors(1, seed=7)[0], **{"filters": SearchFilters(), "per_arm": 10, **extra},
    )  # fmt: skip


async def test_a_question_of_hundreds_of_words_is_matched_on_its_rarest_32(
    conn: asyncpg.Connection,
) -> None:
    """A pasted page is not a scan of the store: the full-text arm matches and scores on
    the question's MAX_QUERY_TERMS rarest lexemes, even unbounded by the match budget."""
    ws, store, _ = await _stores(conn)
    words = [f"zq{i:03d}" for i in range(300)]
    await _write(conn, ws, store, [f"note {w}" for w in words], ["general"] * 300)
    question = " ".join(words) + " note"  # 301 distinct lexemes; "note" in every memory
    found = await sq.store_and_profile(conn, ws, store, question)
    assert found is not None and len(found[1].lexemes) == 301
    who = Principal("k", ws, "scale", "service", None, frozenset(), [])
    values = sq.statement_values(
        _retrieval(who, store, found, question, per_arm=1000), budget=sq.UNBOUNDED
    )
    ranks = await sq.text_ranks(conn, sq.STATEMENTS[True, "all"], values)
    texts = {r["id"]: r["text"] for r in await conn.fetch("SELECT id, text FROM memories")}
    assert sq.MAX_QUERY_TERMS == 32
    # The 32 rarest (one memory each; ties in byte order), never the word of every memory.
    assert {texts[i] for i in ranks} == {f"note {w}" for w in words[:32]}


async def test_the_fallback_to_an_exact_scan_keeps_the_full_text_arms_budget(
    conn: asyncpg.Connection, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter passes fewer memories than the HNSW walk was asked for, so the vector arm
    is answered by the exact scan; the full-text arm, which does not depend on the index,
    keeps its match budget instead of matching every word of the question in the whole
    store (the fallback's cost was linear in the store and in the question's length)."""
    ws, big, _ = await _stores(conn)
    texts = [f"common memory {i}" for i in range(300)]
    texts[60] = "common memory with zucchini"
    categories = ["rare" if i % 60 == 0 else "general" for i in range(300)]
    await _write(conn, ws, big, texts, categories)
    assert await store_indexes.reconcile(db_url, 200) is not None
    await db._init_connection(conn)
    found = await sq.store_and_profile(conn, ws, big, "zucchini common")
    assert found is not None
    who = Principal("k", ws, "scale", "service", None, frozenset(), [])
    rare = SearchFilters(categories=["rare"])  # 5 memories, fewer than the 10 asked for
    monkeypatch.setattr(sq, "MATCH_BUDGET", 1)  # the rarest word only: "zucchini"
    # exact=False: the path of a store past EXACT_BELOW, which has its own index.
    asked = _retrieval(who, big, found, "zucchini common", filters=rare, exact=False)
    got = await sq.candidates(conn, asked)
    ids = {r["text"]: r["id"] for r in await conn.fetch("SELECT id, text FROM memories")}
    rare_ids = {ids[t] for t, c in zip(texts, categories, strict=True) if c == "rare"}
    assert {c.id for c in got} == rare_ids  # the exact scan brought every one
    assert {c.id for c in got if c.fts_rank is not None} == {ids["common memory with zucchini"]}
