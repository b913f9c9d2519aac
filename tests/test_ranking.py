"""The ranking rules that matter (service.ranking): score fusion, supersession, the
speaker a question names; small examples, then the same through the search face."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from service import db, ranking
from service.queries import search as sq
from service.queries.keys import Principal
from service.queries.search import Candidate, SearchFilters
from service.settings import Settings
from tests.helpers import ADMIN, Client, unit_vectors
from tests.test_search import search

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def cand(
    id: str,
    cosine: float | None,
    fts: float | None = None,
    *,
    in_vec: bool = True,
    speaker: str | None = None,
    superseded_by: str | None = None,
    importance: float = 0.5,
) -> Candidate:
    return Candidate(
        id, f"text of {id}", "text", "general", importance, None, speaker, superseded_by,
        None, NOW, NOW, cosine, in_vec, fts,
    )  # fmt: skip


def order(cands: list[Candidate], **kw: Any) -> list[str]:
    kw.setdefault("fuse_text", True)
    kw.setdefault("use_features", True)
    return [c.id for c, _ in ranking.scored(cands, now=NOW, **kw)]


def test_fusion_keeps_a_lead_that_ranks_throw_away() -> None:
    # "a" is far ahead in full text and a close second by vector; "b" leads the vector
    # arm by a hair and has no text match. Reciprocal ranks call it a tie broken by the
    # vector; scores see a's lead.
    cands = [cand("a", 0.70, 9.0), cand("b", 0.71, None), cand("c", 0.20, 1.0)]
    assert order(cands) == ["a", "b", "c"]
    fused = dict((c.id, s) for c, s in ranking.fused(cands, fuse_text=True))
    assert fused["a"] == (0.70 - 0.20) / (0.71 - 0.20) + 1.0
    assert fused["b"] == 1.0 and fused["c"] == 0.0 + 1.0 / 9.0


def test_the_text_weight_shifts_the_balance() -> None:
    cands = [cand("vec", 0.9, 1.0), cand("txt", 0.5, 8.0), cand("low", 0.1)]
    heavy_text = ranking.Weights(text=2.0, speaker=0.0)
    light_text = ranking.Weights(text=0.3, speaker=0.0)
    assert order(cands, weights=heavy_text)[0] == "txt"
    assert order(cands, weights=light_text)[0] == "vec"


def test_without_fusion_the_vector_arm_alone_by_cosine() -> None:
    cands = [cand("t", 0.1, 50.0, in_vec=False), cand("x", 0.3), cand("y", 0.6)]
    assert order(cands, fuse_text=False, use_features=False) == ["y", "x"]


def test_a_memory_without_a_vector_is_ranked_by_its_text() -> None:
    cands = [cand("new", None, 5.0, in_vec=False), cand("old", 0.4), cand("older", 0.2)]
    assert order(cands) == ["new", "old", "older"]


def test_a_superseded_memory_ranks_below_its_superseder_whatever_it_wins() -> None:
    # "old" wins both arms and has the higher importance; "new" replaced it.
    old = cand("old", 0.95, 9.0, superseded_by="new", importance=1.0)
    new = cand("new", 0.30, 1.0, importance=0.0)
    other = cand("other", 0.60, 4.0)
    ranked = order([old, new, other])
    assert ranked.index("new") < ranked.index("old")
    # Along a chain: v1 -> v2 -> v3, v1 best at everything.
    chain = [
        cand("v1", 0.9, 9.0, superseded_by="v2"),
        cand("v2", 0.8, 8.0, superseded_by="v3"),
        cand("v3", 0.1, None),
    ]
    assert order(chain) == ["v3", "v2", "v1"]
    # Without its superseder among the candidates it only sinks (x 0.6).
    gone = cand("gone", 0.90, 1.0, superseded_by="absent")
    alone = order([gone, cand("kept", 0.85, 1.0), cand("low", 0.1)])
    assert alone == ["kept", "gone", "low"]
    assert order([gone, cand("kept", 0.85, 1.0), cand("low", 0.1)], use_features=False)[0] == "gone"
    # Scroll 1.2 has no ranking features: the order is the fused one.
    assert order([old, new], use_features=False) == ["old", "new"]


def test_a_supersession_cycle_still_ranks_everything() -> None:
    a, b = cand("a", 0.9, superseded_by="b"), cand("b", 0.5, superseded_by="a")
    assert sorted(order([a, b])) == ["a", "b"]


def test_the_one_named_speaker_is_found_as_a_word_in_any_case() -> None:
    speakers = ["me", "Caroline", "Melanie", "Al"]
    assert ranking.named_speaker("What did caroline research?", speakers) == "Caroline"
    assert ranking.named_speaker("Is it Caroline's dog?", speakers) == "Caroline"
    assert ranking.named_speaker("Did Caroline meet Melanie?", speakers) is None  # two
    assert ranking.named_speaker("What is the total?", speakers) is None  # no "Al" inside
    assert ranking.named_speaker("Tell me about the dog", speakers) is None  # "me" is the asker


def test_the_named_speakers_memories_are_favoured() -> None:
    cands = [
        cand("mel", 0.80, 2.0, speaker="Melanie"), cand("car", 0.75, 2.0, speaker="Caroline"),
        cand("low", 0.10),
    ]  # fmt: skip
    assert order(cands)[:2] == ["mel", "car"]
    assert order(cands, speaker="Caroline")[:2] == ["car", "mel"]
    no_boost = ranking.Weights(speaker=0.0)
    assert order(cands, speaker="Caroline", weights=no_boost)[:2] == ["mel", "car"]
    # Features are Tablet 2's: Scroll 1.2 ignores the speaker.
    assert order(cands, speaker="Caroline", use_features=False)[:2] == ["mel", "car"]


def test_a_neighbour_of_a_strong_hit_borrows_part_of_its_score() -> None:
    hit, near, far = cand("hit", 0.9, 6.0), cand("near", 0.40), cand("far", 0.45)
    low = cand("low", 0.10)
    cands = [hit, near, far, low]
    assert order(cands) == ["hit", "far", "near", "low"]
    neighbours = {"hit": ("near", "gone")}  # "gone": not a candidate, lends nothing
    assert ranking.lenders(cands, fuse_text=True)[0] == "hit"
    assert order(cands, neighbours=neighbours) == ["hit", "near", "far", "low"]
    assert order(cands, neighbours=neighbours, weights=ranking.Weights(neighbour=0)) == [
        "hit", "far", "near", "low"
    ]  # fmt: skip
    assert ranking.lenders(cands, fuse_text=True, weights=ranking.Weights(neighbour=0)) == []
    # A lender lends its fused score, not what it borrowed: no chains of borrowing.
    chain = {"hit": ("near", None), "near": ("low", None)}
    fused = dict((c.id, s) for c, s in ranking.fused(cands, fuse_text=True))
    scores = dict((c.id, s) for c, s in ranking.scored(cands, fuse_text=True,
                                                        use_features=False, now=NOW))  # fmt: skip
    assert scores == fused
    with_chain = dict((c.id, s) for c, s in ranking.scored(
        cands, fuse_text=True, use_features=True, now=NOW, neighbours=chain))  # fmt: skip
    factor = ranking.features(low, NOW)
    assert with_chain["low"] == (fused["low"] + 0.3 * fused["near"]) * factor


async def test_search_favours_the_speaker_the_question_names(client: Client) -> None:
    # The same words from two speakers, not embedded (no worker here): full text scores
    # them alike, and the speaker's name is not in the text (the full-text arm reads the
    # text only). Melanie's is a little more important (x 1.015 in Tablet 2) and was
    # written first (a tie goes to the lower id); only the speaker feature can put
    # Caroline's first.
    for name in ("Caroline", "Melanie"):
        resp = await client.post(
            "/api/v1/stores/default/speakers", json={"name": name}, headers=ADMIN
        )
        assert resp.status == 201, await resp.text()
    ids = []
    for name, importance in (("Melanie", 0.55), ("Caroline", 0.5)):
        body = {"text": "I went to a pottery class and painted a bowl.", "speaker": name,
                "importance": importance}  # fmt: skip
        resp = await client.post("/api/v1/memories", json=body, headers=ADMIN)
        assert resp.status == 201, await resp.text()
        ids.append((await resp.json())["id"])
    mel, car = ids

    async def top(query: str, model: str = "Tablet 2") -> list[str]:
        out = await search(client, {"user_id": "default", "query": query}, model=model)
        return [m["id"] for m in out["memories"]]

    assert await top("Who went to a pottery class?") == [mel, car]
    assert await top("Did caroline go to a pottery class?") == [car, mel]
    assert await top("Did Caroline's friend go to a pottery class?") == [car, mel]
    # Both named: no favourite.
    assert await top("Did Caroline or Melanie go to a pottery class?") == [mel, car]
    # Scroll 1.2 has no ranking features.
    assert await top("Did Caroline go to a pottery class?", "Scroll 1.2") == [mel, car]


# 120 memories in two scopes, each with a random vector and a text of two of a few words:
# many candidates score alike in full text, so which of them lend depends on both arms.
MANY = """
INSERT INTO memories (workspace_id, id, store_id, text, scope, provider, provider_ref,
                      content_sha256, content_size_bytes, embedding, embedding_model,
                      embedding_status)
SELECT $1, 'mem_lend' || to_char(g, 'FM000'), $2,
       ($4::text[])[1 + g % 5] || ' ' || ($5::text[])[1 + g % 7] || ' number ' || g,
       CASE WHEN g % 4 = 0 THEN 'room:ops' ELSE 'workspace' END, 'test', 'ref-' || g,
       md5(g::text), 16, v::vector, 'test', 'ready'
FROM unnest($3::text[]) WITH ORDINALITY AS x(v, g)
"""


@pytest.mark.parametrize("text_weight", [0.5, 1.0, 2.0])
async def test_the_sql_arms_bring_the_neighbours_of_the_lenders_ranking_picks(
    client: Client, db_url: str, text_weight: float
) -> None:
    """The vector statement picks the lenders itself (the fused score in SQL, to save a
    round trip): exactly ``ranking.lenders`` of what it returns, with the neighbours
    ``search.NEIGHBOURS`` finds for them."""
    pool = await db.create_pool(db_url, Settings(database_url=db_url, pool_min=1, pool_max=1))
    try:
        async with pool.acquire() as conn:
            ws, store = await conn.fetchrow(
                "SELECT workspace_id, id FROM stores WHERE name = 'default'"
            )
            vectors = unit_vectors(120, seed=7)
            noise = np.random.default_rng(7)
            colours = ["red", "green", "blue", "amber", "violet"]
            animals = ["fox", "heron", "otter", "lynx", "crane", "badger", "newt"]
            await conn.execute(MANY, ws, store, [str(v.tolist()) for v in vectors], colours,
                               animals)  # fmt: skip
            found = await sq.store_and_profile(conn, ws, store)
            assert found is not None
            who = Principal("k", ws, "lend", "service", None, frozenset(), [])
            weights = ranking.Weights(text=text_weight)
            for query_text, near in (("red fox", 3), ("blue otter lynx", 50), ("heron", 99)):
                query = vectors[near] + 0.5 * noise.normal(size=384).astype(np.float32)
                cands = await sq.candidates(
                    conn, who, store, found[1], query / np.linalg.norm(query), query_text,
                    SearchFilters(), per_arm=60, lenders=ranking.lender_count(weights),
                    text_weight=text_weight,
                )  # fmt: skip
                lent = {c.id: c.neighbours for c in cands if c.neighbours is not None}
                assert len(cands) > len(lent) == ranking.LENDERS
                assert set(lent) == set(ranking.lenders(cands, fuse_text=True, weights=weights))
                assert lent == await sq.neighbours(conn, ws, list(lent))
                # Each scope is its own run: a neighbour shares its lender's scope.
                scope = {r["id"]: r["scope"] for r in await conn.fetch(
                    "SELECT id, scope FROM memories WHERE workspace_id = $1", ws)}  # fmt: skip
                for lender, sides in lent.items():
                    assert all(scope[n] == scope[lender] for n in sides if n is not None)
                    assert sides != (None, None)
    finally:
        await pool.close()
