"""Search at scale: the trigger-kept BM25 statistics, and the HNSW path's fallback."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import numpy as np
import numpy.typing as npt
import pytest

from service.app_keys import PLANNED_ONCE_POOL, POOL
from service.ops import db
from service.queries import search as sq, search_stats, uses
from service.queries.keys import Principal
from service.queries.search import SearchFilters
from service.settings import Settings
from tests.helpers import ADMIN, Client

PNG = "iVBORw0KGgoAAAAAAAAAAAAAAAAAAAA="

RECOMPUTED_STATS = """
SELECT workspace_id, store_id, count(*) AS docs, sum(length(search_tsv)) AS length,
       count(*) FILTER (WHERE speaker = 'me') AS self_docs,
       count(*) FILTER (WHERE kind = 'image') AS image_docs
FROM memories WHERE status = 'active'
GROUP BY 1, 2
"""
KEPT_STATS = """
SELECT workspace_id, store_id, sum(docs) AS docs, sum(length) AS length,
       sum(self_docs) AS self_docs, sum(image_docs) AS image_docs
FROM search_store_stats
GROUP BY 1, 2
HAVING sum(docs) <> 0 OR sum(length) <> 0
"""
RECOMPUTED_TERMS = """
SELECT workspace_id, store_id, lexeme, count(*) AS df
FROM memories, unnest(tsvector_to_array(search_tsv)) AS lexeme
WHERE status = 'active'
GROUP BY 1, 2, 3
"""
KEPT_TERMS = """
SELECT workspace_id, store_id, lexeme, sum(df) AS df FROM search_terms
GROUP BY 1, 2, 3 HAVING sum(df) <> 0
"""


async def both_arms(
    conn: asyncpg.Connection, statements: sq.ArmStatements, values: dict[str, object]
) -> list[sq.Candidate]:
    """Both arms of ``statements``, one after the other (no fallback to the exact scan)."""
    return await sq.with_vectors(
        conn, statements, values, await sq.text_ranks(conn, statements, values)
    )


async def assert_stats_exact(conn: asyncpg.Connection) -> None:
    def rows(records: list[asyncpg.Record]) -> set[tuple[Any, ...]]:
        return {tuple(r) for r in records}

    assert rows(await conn.fetch(KEPT_STATS)) == rows(await conn.fetch(RECOMPUTED_STATS))
    assert rows(await conn.fetch(KEPT_TERMS)) == rows(await conn.fetch(RECOMPUTED_TERMS))


async def post(client: Client, url: str, body: dict[str, Any], status: int = 201) -> Any:
    resp = await client.post(url, json=body, headers=ADMIN)
    assert resp.status == status, await resp.text()
    return await resp.json()


async def test_statistics_follow_every_kind_of_write(
    client: Client, conn: asyncpg.Connection
) -> None:
    other = await post(client, "/api/v1/forward/memory_stores", {"name": "other"})
    a = await post(client, "/api/v1/memories", {"text": "Rover chases the red ball daily."})
    await post(client, "/api/v1/memories", {"text": "I water the ferns.", "speaker": "me"})
    await post(
        client,
        "/api/v1/memories",
        {"text": "Lake photo", "image": {"data": PNG, "mimeType": "image/png"}},
    )
    dup = await post(
        client, "/api/v1/memories", {"text": "Rover chases the red ball daily."}, status=200
    )
    assert dup["deduplicated"] is True  # a dedupe counts nothing new
    batch = await post(
        client, "/api/v1/memories",
        {"memories": [{"text": f"Batch fact {i} about ferns and balls"} for i in range(5)]
         + [{"text": "Other store's ball", "store": "other"}]},
        status=200,
    )  # fmt: skip
    await assert_stats_exact(conn)

    resp = await client.patch(
        f"/api/v1/memories/{a['id']}", json={"text": "Rover fetches sticks now."}, headers=ADMIN
    )
    assert resp.status == 200, await resp.text()
    await assert_stats_exact(conn)
    first = batch["memories"][0]["id"]
    resp = await client.patch(f"/api/v1/memories/{first}", json={"status": "archived"},
                              headers=ADMIN)  # fmt: skip
    assert resp.status == 200, await resp.text()
    await assert_stats_exact(conn)
    resp = await client.patch(f"/api/v1/memories/{first}", json={"status": "active"},
                              headers=ADMIN)  # fmt: skip
    assert resp.status == 200, await resp.text()
    resp = await client.delete(f"/api/v1/memories/{batch['memories'][1]['id']}", headers=ADMIN)
    assert resp.status == 200
    resp = await client.delete(
        f"/api/v1/memories/{batch['memories'][2]['id']}?purge=true", headers=ADMIN
    )
    assert resp.status == 200
    # Vectors and last_used_at change nothing that is counted.
    await conn.execute("UPDATE memories SET last_used_at = now()")
    await assert_stats_exact(conn)
    deltas = await conn.fetchval("SELECT count(*) FROM search_terms")

    # Compaction folds the deltas into one row per lexeme and keeps the sums.
    assert await search_stats.compact_stats(conn) == 2
    await assert_stats_exact(conn)
    compacted = await conn.fetchval("SELECT count(*) FROM search_terms")
    assert compacted < deltas
    assert await conn.fetchval(
        "SELECT count(*) = count(DISTINCT (workspace_id, store_id, lexeme)) AND bool_and(compacted)"
        " FROM search_terms"
    )
    assert await search_stats.compact_stats(conn) == 0  # nothing fresh left

    # A deleted store's statistics sum to nothing and disappear with the next compaction.
    resp = await client.delete(
        f"/api/v1/forward/memory_stores/{other['id']}?force=true", headers=ADMIN
    )
    assert resp.status == 200, await resp.text()
    await assert_stats_exact(conn)
    assert await search_stats.compact_stats(conn) == 1
    left = await conn.fetch(
        "SELECT DISTINCT s.name FROM search_terms t JOIN stores s ON s.id = t.store_id"
        " UNION SELECT DISTINCT coalesce(s.name, '(deleted)') FROM search_store_stats t"
        " LEFT JOIN stores s ON s.id = t.store_id"
    )
    assert sorted(r[0] for r in left) == ["default"]


async def test_a_new_self_memory_is_found_before_its_vector(client: Client) -> None:
    """self_memories is skipped for a store without any; the counts are transactional, so
    a memory written a moment ago is searched at once (by its words)."""
    body = {"user_id": "default", "query": "quarterly report"}
    before = await post(client, "/api/v1/memory/search", body, status=200)
    assert before["self_memories"] == []
    await post(client, "/api/v1/memories", {"text": "I owe the quarterly report.", "speaker": "me"})
    after = await post(client, "/api/v1/memory/search", body, status=200)
    assert [m["content"] for m in after["self_memories"]] == ["I owe the quarterly report."]


FILTERED = """
INSERT INTO memories (workspace_id, id, store_id, text, scope, provider, provider_ref,
                      content_sha256, content_size_bytes, category, embedding, embedding_model,
                      embedding_status)
SELECT $1, 'mem_scale' || to_char(g, 'FM0000'), $2, 'memory number ' || g, 'workspace', 'test',
       'ref-' || g, md5(g::text), 16, CASE WHEN g % 60 = 0 THEN 'rare' ELSE 'common' END,
       v::vector, 'test', 'ready'
FROM unnest($3::text[]) WITH ORDINALITY AS x(v, g)
"""


async def test_a_filtered_hnsw_scan_that_comes_up_short_is_answered_exactly(
    client: Client, db_url: str
) -> None:
    """Without pgvector's iterative scan, HNSW hands back ef_search rows and the filter
    keeps a few of them; the service notices it got fewer than it asked for and asks the
    exact scan instead, so every 'rare' memory is still a candidate."""
    pool = await db.create_pool(db_url, _settings(db_url))
    try:
        async with pool.acquire() as conn:
            ws, store = await conn.fetchrow(
                "SELECT workspace_id, id FROM stores WHERE name = 'default'"
            )
            rng = np.random.default_rng(3)
            vectors = rng.normal(size=(600, 384)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            await conn.execute(FILTERED, ws, store, [str(v.tolist()) for v in vectors])
            await conn.execute(
                "SET hnsw.iterative_scan = off; SET hnsw.ef_search = 40; SET enable_sort = off"
            )
            who = Principal("k", ws, "scale", "service", None, frozenset(), [])
            stats = await _profile(conn, ws, store)
            rare = SearchFilters(categories=["rare"])
            query = vectors[0]
            plain = await both_arms(
                conn, sq.STATEMENTS[False, "all"],
                sq.statement_values(_retrieval(who, store, stats, query, "", rare),
                                    budget=sq.MATCH_BUDGET),
            )  # fmt: skip
            assert len(plain) < 10  # the index alone misses most of them
            served = await sq.candidates(
                conn, _retrieval(who, store, stats, query, "", rare, exact=False)
            )
            exact = await sq.candidates(
                conn, _retrieval(who, store, stats, query, "", rare, exact=True)
            )
            assert {c.id for c in served} == {c.id for c in exact}
            assert len(exact) == 10
    finally:
        await pool.close()


async def _profile(conn: asyncpg.Connection, ws: str, store: str) -> sq.Profile:
    found = await sq.store_and_profile(conn, ws, store)
    assert found is not None
    return found[1]


def _retrieval(
    who: Principal,
    store: str,
    stats: sq.Profile,
    vector: npt.NDArray[np.float32],
    query: str,
    filters: SearchFilters,
    exact: bool | None = None,
) -> sq.RetrievalRequest:
    """A retrieval of 60 candidates per arm."""
    return sq.RetrievalRequest(
        principal=who, store_id=store, profile=stats, query_text=query, vector=vector,
        filters=filters, per_arm=60, exact=exact,
    )  # fmt: skip


def _settings(db_url: str) -> Any:
    from service.settings import Settings

    return Settings(database_url=db_url, pool_min=1, pool_max=2)


@pytest.mark.parametrize("budget", [1, sq.UNBOUNDED])
async def test_the_match_budget_keeps_the_rarest_word(
    client: Client, conn: asyncpg.Connection, budget: int
) -> None:
    """With a budget of one posting, memories match on the question's rarest word only;
    the common word still adds to their score. Unbounded, every word matches."""
    await post(
        client, "/api/v1/memories",
        {"memories": [{"text": f"coffee note {i}"} for i in range(5)]
         + [{"text": "coffee with zucchini bread"}]},
        status=200,
    )  # fmt: skip
    await db._init_connection(conn)
    ws, store = await conn.fetchrow("SELECT workspace_id, id FROM stores WHERE name = 'default'")
    stats = await _profile(conn, ws, store)
    who = Principal("k", ws, "scale", "service", None, frozenset(), [])
    rows = await both_arms(
        conn, sq.STATEMENTS[False, "all"],
        sq.statement_values(_retrieval(who, store, stats, np.ones(384, dtype=np.float32),
                                       "zucchini coffee", SearchFilters()), budget=budget),
    )  # fmt: skip
    matched = {r.text for r in rows if r.fts_rank is not None}
    if budget == 1:
        assert matched == {"coffee with zucchini bread"}
    else:
        assert len(matched) == 6


def _cand(cid: str, day: int) -> sq.Candidate:
    from datetime import UTC, datetime

    when = datetime(2026, 5, day, 12, tzinfo=UTC)
    return sq.Candidate(
        id=cid, text=cid, kind="text", category="general", importance=0.5, proof_count=None,
        speaker=None, superseded_by=None, event_date=when, created_at=when, last_used_at=when,
        cosine=0.5, in_vec=True, fts_rank=None,
    )  # fmt: skip


def test_verify_passes_draw_on_the_days_already_found() -> None:
    from service.retrieval.verify import VERIFY_SAME_DAY, verify_passes

    ranked = [
        (_cand("a", 1), 1.0),
        (_cand("b", 2), 0.9),
        (_cand("c", 3), 0.8),  # best of the rest by score, but on a day not drawn on yet
        (_cand("d", 1), 0.8 / VERIFY_SAME_DAY * 1.01),  # same day as "a": weighs more
        (_cand("e", 4), 0.1),
    ]
    first = [c for c, _ in ranked[:2]]
    out, used = verify_passes(first, ranked, per_pass=2, passes=3)
    assert [c.id for c in out] == ["a", "b", "d", "c", "e"]
    assert used == 2  # the third pass found nothing left and stopped early
    assert len({c.id for c in out}) == len(out)


async def test_search_reports_its_phases_in_server_timing(client: Client) -> None:
    await post(client, "/api/v1/memories", {"text": "Timing is everything."})
    resp = await client.post(
        "/api/v1/memory/search", json={"user_id": "default", "query": "timing"}, headers=ADMIN
    )
    assert resp.status == 200
    names = [part.split(";")[0].strip() for part in resp.headers["Server-Timing"].split(",")]
    assert names == ["app", "auth", "store", "text", "embed", "retrieve", "render", "bill"]


async def test_generic_plans_stay_in_the_small_stores_pool(
    make_client: Callable[[Settings], Awaitable[Client]], settings: Settings
) -> None:
    # A small store's search runs on connections that plan statements generically; the
    # main pool's keep planning every statement for its values (big stores' HNSW). The
    # SQL arms are watched here: no snapshot answers instead.
    client = await make_client(settings.with_overrides(snapshot_bytes=0))
    await post(client, "/api/v1/memories", {"text": "Plans are nothing; planning is everything."})
    for _ in range(3):
        resp = await client.post(
            "/api/v1/memory/search", json={"user_id": "default", "query": "planning"},
            headers=ADMIN,
        )  # fmt: skip
        assert resp.status == 200
        assert [m["content"] for m in (await resp.json())["memories"]] == [
            "Plans are nothing; planning is everything."
        ]
    # The full-text arm's statement (it reads search_terms), by how it was planned.
    plans = """
        SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0)
        FROM pg_prepared_statements
        WHERE statement LIKE '%FROM search_terms t%' AND statement NOT LIKE '%pg_prepared%'
    """
    seen = {}
    for key, mode in ((POOL, "force_custom_plan"), (PLANNED_ONCE_POOL, "force_generic_plan")):
        pool = client.app[key]
        held = [await pool.acquire() for _ in range(pool.get_size())]
        try:
            for conn in held:
                assert await conn.fetchval("SHOW plan_cache_mode") == mode
            seen[key] = [tuple(await conn.fetchrow(plans)) for conn in held]
        finally:
            for conn in held:
                await pool.release(conn)
    assert all(counts == (0, 0) for counts in seen[POOL]), seen  # no search ran there
    assert sum(g for g, _ in seen[PLANNED_ONCE_POOL]) == 3  # and three ran here, generic
    assert sum(c for _, c in seen[PLANNED_ONCE_POOL]) == 0


async def test_pooled_connections_keep_the_search_settings_after_a_release(db_url: str) -> None:
    """The pool resets a connection it takes back (RESET ALL); the settings survive."""
    pool = await db.create_pool(db_url, _settings(db_url))
    try:
        for _ in range(3):  # one connection, taken and given back
            async with pool.acquire() as conn:
                await conn.execute("SELECT '[1,2,3]'::vector")  # the extension is loaded
                for name, value in db.SERVER_SETTINGS.items():
                    assert await conn.fetchval(f"SHOW {name}") == value
    finally:
        await pool.close()


async def test_the_full_text_score_is_bm25_of_the_stores_statistics(
    client: Client, conn: asyncpg.Connection
) -> None:
    """The statement's score is BM25 (k1 = 1.2, b = 0.75) over the question's lexemes,
    each counted as often as it occurs in the memory, recomputed here in Python."""
    import math

    texts = [
        "Rain, rain and more rain in the valley today",
        "The valley is quiet",
        "Rain stopped the hike",
        "Nothing about the weather here at all, just a long note on bread and ovens",
    ]
    await post(client, "/api/v1/memories", {"memories": [{"text": t} for t in texts]}, status=200)
    await db._init_connection(conn)
    ws, store = await conn.fetchrow("SELECT workspace_id, id FROM stores WHERE name = 'default'")
    stats = await _profile(conn, ws, store)
    question = "rain in the valley"
    who = Principal("k", ws, "scale", "service", None, frozenset(), [])
    rows = await both_arms(
        conn, sq.STATEMENTS[True, "all"],
        sq.statement_values(_retrieval(who, store, stats, np.ones(384, dtype=np.float32),
                                       question, SearchFilters()), budget=sq.UNBOUNDED),
    )  # fmt: skip
    served = {r.text: r.fts_rank for r in rows if r.fts_rank is not None}

    docs = {
        t: [lex for lex, positions in await _lexemes(conn, t) for _ in range(positions)]
        for t in texts
    }
    query = {lex for lex, _ in await _lexemes(conn, question)}
    n, avgdl = len(texts), sum(len(set(d)) for d in docs.values()) / len(texts)
    expected = {}
    for text, words in docs.items():
        score = 0.0
        for lex in query & set(words):
            df = sum(lex in d for d in docs.values())
            tf = words.count(lex)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len(set(words)) / avgdl))
        if score:
            expected[text] = score
    assert served.keys() == expected.keys()
    for text, score in expected.items():
        assert served[text] == pytest.approx(score, rel=1e-9), text
    assert docs[texts[0]].count("rain") == 3  # the repeated word is counted three times


async def _lexemes(conn: asyncpg.Connection, text: str) -> list[tuple[str, int]]:
    rows = await conn.fetch(
        "SELECT lexeme, cardinality(positions) FROM unnest(to_tsvector('english', $1))", text
    )
    return [(r[0], r[1]) for r in rows]


async def test_a_memory_row_keeps_its_text_and_vector_together(
    client: Client, conn: asyncpg.Connection
) -> None:
    """A row with a 1.5 kB vector and a kilobyte of text stays whole (0004): nothing of it
    goes to the TOAST table, so a search reads one row, not three places."""
    text = " ".join(f"word{i}" for i in range(150))  # ~1.1 kB of text, ~1.7 kB of tsvector
    await post(client, "/api/v1/memories", {"text": text})
    vector = str([0.05] * 384)
    await conn.execute("UPDATE memories SET embedding = $1::vector", vector)
    size, toast = await conn.fetchrow(
        "SELECT (SELECT pg_column_size(m.*) FROM memories m), pg_relation_size(reltoastrelid) "
        "FROM pg_class WHERE relname = 'memories'"
    )
    assert size > 2100  # past the 2 kB where PostgreSQL would start moving values out
    assert toast == 0


async def test_a_search_stamps_last_used_without_rewriting_the_memory(
    client: Client, conn: asyncpg.Connection
) -> None:
    """The stamp goes to memory_uses (0005): the memory's wide row, and so its vector's
    HNSW entry, is left as it was. A writer's own lastUsedAt is still what is read back,
    and deleting a memory takes its stamp with it."""
    import asyncio

    body = {"text": "The lighthouse keeper feeds the gulls", "providerRef": "lh-1"}
    m = await post(client, "/api/v1/memories", body)
    url = f"/api/v1/memories/{m['id']}"
    version = await conn.fetchval("SELECT (ctid, xmin)::text FROM memories WHERE id = $1", m["id"])
    resp = await client.post(
        "/api/v1/memory/search", json={"user_id": "default", "query": "lighthouse"}, headers=ADMIN
    )
    assert m["id"] in {r["id"] for r in (await resp.json())["memories"]}
    for _ in range(50):  # stamped off the response path
        got = await (await client.get(url, headers=ADMIN)).json()
        if got["lastUsedAt"] != m["lastUsedAt"]:
            break
        await asyncio.sleep(0.1)
    assert got["lastUsedAt"] > m["lastUsedAt"]
    assert await conn.fetchval(
        "SELECT (ctid, xmin)::text FROM memories WHERE id = $1", m["id"]
    ) == version  # fmt: skip

    synced = await post(
        client, "/api/v1/memories", {**body, "lastUsedAt": "2025-01-01T00:00:00Z"}, status=200
    )  # a sync's upsert
    assert synced["lastUsedAt"] == "2025-01-01T00:00:00.000Z"
    got = await (await client.get(url, headers=ADMIN)).json()
    assert got["lastUsedAt"] == "2025-01-01T00:00:00.000Z"

    await conn.execute(
        "INSERT INTO memory_uses SELECT workspace_id, id, now() FROM memories WHERE id = $1",
        m["id"],
    )
    await conn.execute("DELETE FROM memories WHERE id = $1", m["id"])
    assert await conn.fetchval("SELECT count(*) FROM memory_uses") == 0


async def test_a_stamp_skips_a_memory_deleted_while_it_was_written(
    client: Client, db_url: str, conn: asyncpg.Connection
) -> None:
    """The stamp waits for a transaction deleting one of its memories; once that commits,
    the stamp is written for the others instead of failing the whole batch."""
    import asyncio

    a = await post(client, "/api/v1/memories", {"text": "alpha note"})
    b = await post(client, "/api/v1/memories", {"text": "beta note"})
    ws = await conn.fetchval("SELECT workspace_id FROM memories WHERE id = $1", a["id"])
    deleter = await asyncpg.connect(db_url)
    pool = await db.create_pool(db_url, _settings(db_url))
    try:
        tx = deleter.transaction()
        await tx.start()
        await deleter.execute("DELETE FROM memories WHERE id = $1", a["id"])
        stamp = asyncio.create_task(uses.touch(pool, ws, sorted([a["id"], b["id"]])))
        await asyncio.sleep(0.5)
        assert not stamp.done()  # it waits on the deleter's row
        await tx.commit()
        await asyncio.wait_for(stamp, 10)
        assert await conn.fetchval("SELECT array_agg(memory_id) FROM memory_uses") == [b["id"]]
    finally:
        await deleter.close()
        await pool.close()
