"""Search face (seed 002, SPEC §3.3): validation, models, retrieval, rendering."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

import asyncpg
import pytest

from embeddings.model import SentenceTransformerEmbedder
from service.app_keys import EMBEDDER
from service.queries.memories import LAST_USED_AT
from tests.helpers import ADMIN, PNG, URL, Client, auth, make_key, search, seed

FACTS: list[dict[str, Any]] = [
    {"text": "Alice drinks oat milk flat whites every morning.", "importance": 0.9},
    {"text": "The deploy pipeline runs on Fridays at noon.", "category": "ops"},
    {"text": "Bob is allergic to peanuts.", "factType": "world"},
    {"text": "The office moved from Leeds to York in 2025.", "tier": "core"},
    {"text": "I promised to send the quarterly report.", "speaker": "me"},
    {"text": "A photo of the team at the lake", "image": {"data": PNG, "mimeType": "image/png"}},
]


@pytest.fixture
async def facts(client: Client, db_url: str, embedder: SentenceTransformerEmbedder) -> list[str]:
    return await seed(client, db_url, embedder, FACTS)


# --- validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"query": "x"}, "user_id"),
        ({"user_id": "", "query": "x"}, "user_id"),
        ({"user_id": "-bad", "query": "x"}, "user_id"),
        ({"user_id": "a" * 65, "query": "x"}, "user_id"),
        ({"user_id": "default"}, "query"),
        ({"user_id": "default", "query": "   "}, "query"),
        ({"user_id": "default", "query": "x" * 8193}, "8192"),
        ({"user_id": "default", "query": "x", "max_results": 4}, "max_results"),
        ({"user_id": "default", "query": "x", "max_results": 21}, "max_results"),
        ({"user_id": "default", "query": "x", "max_results": "10"}, "max_results"),
        ({"user_id": "default", "query": "x", "max_results": True}, "max_results"),
        ({"user_id": "default", "query": "x", "verify": 4}, "verify"),
        ({"user_id": "default", "query": "x", "verify": -1}, "verify"),
        ({"user_id": "default", "query": "x", "max_images": 6}, "max_images"),
        ({"user_id": "default", "query": "x", "tz": 15}, "tz"),
        ({"user_id": "default", "query": "x", "tz": -13}, "tz"),
        ({"user_id": "default", "query": "x", "form": "diary"}, "form"),
        (
            {"user_id": "default", "query": "x", "cache_control": {"type": "persistent"}},
            "cache_control",
        ),
        (
            {
                "user_id": "default",
                "query": "x",
                "cache_control": {"type": "ephemeral", "ttl": "2h"},
            },
            "ttl",
        ),
        ({"user_id": "default", "query": "x", "filters": []}, "filters"),
        ({"user_id": "default", "query": "x", "filters": {"tier": 5}}, "tier"),
        ({"user_id": "default", "query": "x", "filters": {"min_importance": 2}}, "min_importance"),
        (
            {"user_id": "default", "query": "x", "filters": {"include_superseded": "no"}},
            "include_superseded",
        ),
        (
            {"user_id": "default", "query": "x", "filters": {"created_after": "last week"}},
            "created_after",
        ),
    ],
)
async def test_bad_requests_are_400_never_clamped(
    client: Client, body: dict[str, Any], needle: str
) -> None:
    resp = await client.post(URL, json=body, headers=ADMIN)
    assert resp.status == 400, await resp.text()
    error = (await resp.json())["error"]
    assert error["type"] == "invalid_request_error" and needle in error["message"]


async def test_unknown_model_is_a_400_listing_the_names(client: Client) -> None:
    resp = await client.post(
        URL, json={"user_id": "default", "query": "x"}, headers={**ADMIN, "X-WOS-Model": "Quill 9"}
    )
    assert resp.status == 400
    assert (await resp.json())["error"]["valid"] == ["Tablet 2", "Scroll 1.2", "Scroll 1.1"]


@pytest.mark.parametrize(
    ("model", "body", "allowed"),
    [
        ("Scroll 1.2", {"verify": 1}, False),
        ("Scroll 1.2", {"max_images": 1}, False),
        ("Scroll 1.2", {"form": "memoir"}, True),
        ("Scroll 1.1", {"form": "memoir"}, False),
        ("Scroll 1.1", {"verify": 2}, False),
        ("Scroll 1.1", {"max_images": 0}, True),
        ("Scroll 1.2", {"max_images": None, "verify": None, "form": None}, True),  # not sent
        ("Scroll 1.1", {"verify": 0}, True),
        ("scroll-1.1", {}, True),
        ("TABLET  2", {"verify": 3, "max_images": 5, "form": "archive"}, True),
    ],
)
async def test_capabilities_per_model(
    client: Client, model: str, body: dict[str, Any], allowed: bool
) -> None:
    resp = await client.post(
        URL,
        json={"user_id": "default", "query": "coffee", **body},
        headers={**ADMIN, "X-WOS-Model": model},
    )
    if allowed:
        assert resp.status == 200, await resp.text()
    else:
        assert resp.status == 403
        message = (await resp.json())["error"]["message"]
        assert "Scroll 1.1" in message or "Scroll 1.2" in message


async def test_unknown_store_and_unregistered_speaker_are_404(client: Client) -> None:
    await search(client, {"user_id": "nope", "query": "x"}, status=404)
    await search(client, {"user_id": "default", "query": "x", "speaker": "Caroline"}, status=404)
    await search(client, {"user_id": "DEFAULT", "query": "x", "speaker": "me"})


async def test_search_needs_the_read_scope(client: Client) -> None:
    writer = await make_key(client, kind="service", scopes=["memory:write"])
    resp = await client.post(URL, json={"user_id": "default", "query": "x"}, headers=auth(writer))
    assert resp.status == 403


async def test_unknown_filter_keys_are_dropped_with_a_warning(client: Client) -> None:
    out = await search(
        client, {"user_id": "default", "query": "x", "filters": {"catgory": "ops"}, "colour": 1}
    )
    assert any("catgory" in w for w in out["warnings"])
    assert any("colour" in w for w in out["warnings"])


# --- retrieval and rendering --------------------------------------------------------------


async def test_finds_the_relevant_memory_first(client: Client, facts: list[str]) -> None:
    out = await search(
        client, {"user_id": "default", "query": "what does alice drink?", "max_results": 5}
    )
    assert out["memories"][0]["content"].startswith("Alice drinks oat milk")
    m = out["memories"][0]
    # event_date is seed 002's string "if known": absent, not null, for a memory without one
    assert set(m) == {"id", "content", "category", "similarity", "importance", "time_bucket",
                      "is_superseded", "superseded_by", "created_at"}  # fmt: skip
    assert 0 < m["similarity"] <= 1 and m["importance"] == 0.9
    assert m["created_at"].endswith("Z") and len(m["time_bucket"]) == 7
    assert (m["is_superseded"], m["superseded_by"]) == (False, None)
    assert "verify_used" not in out


async def test_tablet_keeps_self_memories_and_images_apart(
    client: Client, facts: list[str]
) -> None:
    out = await search(
        client, {"user_id": "default", "query": "the quarterly report I promised", "max_results": 5}
    )
    assert all(m.get("speaker") != "me" for m in out["memories"])
    assert out["self_memories"][0]["content"] == "I promised to send the quarterly report."
    assert out["self_memories"][0]["speaker"] == "me"
    assert len(out["images"]) == 1  # max_images defaults to 1
    assert out["images"][0]["media_url"].endswith("/media")
    assert all(m["id"] != out["images"][0]["id"] for m in out["memories"])
    none = await search(client, {"user_id": "default", "query": "lake photo", "max_images": 0})
    assert none["images"] == []
    me = await search(client, {"user_id": "default", "query": "report", "speaker": "me"})
    assert me["memories"] == [] and me["self_memories"]


async def test_scroll_models_mix_self_memories_in(client: Client, facts: list[str]) -> None:
    for model in ("Scroll 1.2", "Scroll 1.1"):
        out = await search(
            client,
            {"user_id": "default", "query": "the quarterly report I promised", "max_results": 5},
            model=model,
        )
        assert "self_memories" not in out and "images" not in out
        assert any(m.get("speaker") == "me" for m in out["memories"])
    out = await search(client, {"user_id": "default", "query": "x"}, model="Scroll 1.2")
    assert len(out["memories"]) <= 15


async def test_default_max_results_per_model(
    client: Client, db_url: str, embedder: SentenceTransformerEmbedder
) -> None:
    await seed(
        client, db_url, embedder, [{"text": f"fact number {i} about the garden"} for i in range(30)]
    )
    assert len((await search(client, {"user_id": "default", "query": "garden"}))["memories"]) == 20
    assert (
        len(
            (await search(client, {"user_id": "default", "query": "garden"}, model="Scroll 1.2"))[
                "memories"
            ]
        )
        == 15
    )
    assert (
        len(
            (await search(client, {"user_id": "default", "query": "garden", "max_results": 5}))[
                "memories"
            ]
        )
        == 5
    )


async def test_an_edit_is_never_found_by_the_meaning_it_took_out(
    client: Client, db_url: str, embedder: SentenceTransformerEmbedder, conn: asyncpg.Connection
) -> None:
    # Until the worker encodes the new text, the old vector spoke for words the memory no
    # longer has (and for good, had the new text failed to encode).
    [edited] = await seed(client, db_url, embedder, [{"text": "Bob's therapist is Dr. Hale."}])
    await seed(client, db_url, embedder, [{"text": "The printer is on the second floor."}])
    resp = await client.patch(
        f"/api/v1/memories/{edited}", json={"text": "Bob moved desks."}, headers=ADMIN
    )
    assert resp.status == 200
    assert await conn.fetchval("SELECT embedding FROM memories WHERE id = $1", edited) is None
    asked = {"user_id": "default", "query": "who is the psychologist?", "max_results": 5}
    found = await search(client, asked, model="Scroll 1.1")  # the vector arm alone
    assert edited not in [m["id"] for m in found["memories"]]
    await seed(client, db_url, embedder, [])  # the worker encodes the new text
    moved = await search(client, {**asked, "query": "where does Bob sit?"}, model="Scroll 1.1")
    assert moved["memories"][0]["id"] == edited


async def test_filters_narrow_the_memories(client: Client, facts: list[str]) -> None:
    body = {"user_id": "default", "query": "anything at all", "max_results": 20}
    ops = await search(client, {**body, "filters": {"category": "ops"}})
    assert [m["content"] for m in ops["memories"]] == [
        "The deploy pipeline runs on Fridays at noon."
    ]
    core = await search(client, {**body, "filters": {"tier": ["core"]}})
    assert [m["content"] for m in core["memories"]] == [
        "The office moved from Leeds to York in 2025."
    ]
    important = await search(client, {**body, "filters": {"min_importance": 0.8}})
    assert [m["content"] for m in important["memories"]] == [
        "Alice drinks oat milk flat whites every morning."
    ]
    future = await search(client, {**body, "filters": {"created_after": "2999-01-01T00:00:00Z"}})
    assert future["memories"] == []
    # Filters do not apply to self_memories.
    assert ops["self_memories"]


async def test_superseded_memories_sink_or_drop(
    client: Client, db_url: str, embedder: SentenceTransformerEmbedder
) -> None:
    [old] = await seed(client, db_url, embedder, [{"text": "The team standup is at 9:00."}])
    [new] = await seed(
        client, db_url, embedder, [{"text": "The team standup is at 9:30.", "supersedes": old}]
    )
    out = await search(
        client, {"user_id": "default", "query": "when is the team standup?", "max_results": 5}
    )
    ids = [m["id"] for m in out["memories"]]
    assert ids.index(new) < ids.index(old)
    old_item = out["memories"][ids.index(old)]
    assert old_item["is_superseded"] is True and old_item["superseded_by"] == new
    dropped = await search(
        client,
        {
            "user_id": "default",
            "query": "when is the team standup?",
            "filters": {"include_superseded": False},
        },
    )
    assert old not in [m["id"] for m in dropped["memories"]]


async def test_unembedded_memories_are_found_by_text_with_similarity_zero(client: Client) -> None:
    resp = await client.post(
        "/api/v1/memories", json={"text": "Zanzibar ferry timetable"}, headers=ADMIN
    )
    assert resp.status == 201
    out = await search(client, {"user_id": "default", "query": "zanzibar ferry"})
    assert out["memories"][0]["content"] == "Zanzibar ferry timetable"
    assert out["memories"][0]["similarity"] == 0


async def test_forms_render_times_in_the_given_zone(
    client: Client, db_url: str, embedder: SentenceTransformerEmbedder
) -> None:
    await seed(
        client,
        db_url,
        embedder,
        [{"text": "Concert in the park", "eventDate": "2026-07-04T13:05:00Z"}],
    )
    memoir = await search(
        client, {"user_id": "default", "query": "concert", "form": "memoir", "tz": 2}
    )
    assert memoir["memories"][0]["event_date"] == "Saturday, 4 July 2026, 15:05"
    archive = await search(
        client,
        {"user_id": "default", "query": "concert", "tz": 2},
        headers={"X-WOS-Form": "archive"},
    )
    assert archive["memories"][0]["event_date"] == "2026-07-04 15:05 UTC+02:00"
    west = await search(
        client, {"user_id": "default", "query": "concert", "form": "archive", "tz": -5}
    )
    assert west["memories"][0]["event_date"] == "2026-07-04 08:05 UTC-05:00"
    plain = await search(client, {"user_id": "default", "query": "concert"})
    assert plain["memories"][0]["event_date"] == "2026-07-04T13:05:00.000Z"
    assert plain["memories"][0]["time_bucket"] == "2026-07"


async def test_strip_temporal_omits_created_at_and_time_bucket(
    client: Client, facts: list[str], conn: asyncpg.Connection
) -> None:
    await conn.execute("UPDATE stores SET strip_temporal = true WHERE name = 'default'")
    out = await search(client, {"user_id": "default", "query": "alice"})
    assert all("created_at" not in m and "time_bucket" not in m for m in out["memories"])


async def test_returned_memories_get_last_used_now(
    client: Client, facts: list[str], conn: asyncpg.Connection
) -> None:
    await conn.execute("UPDATE memories SET last_used_at = '2020-01-01'")
    out = await search(client, {"user_id": "default", "query": "alice", "max_results": 5})
    returned = (
        {m["id"] for m in out["memories"]}
        | {m["id"] for m in out["self_memories"]}
        | {m["id"] for m in out["images"]}
    )
    for _ in range(30):
        touched = {
            r["id"]
            for r in await conn.fetch(
                f"SELECT id FROM memories m WHERE {LAST_USED_AT} > '2021-01-01'"
            )
        }
        if touched:
            break
        await asyncio.sleep(0.1)
    assert touched == returned


async def test_unreadable_memories_are_never_returned(client: Client, facts: list[str]) -> None:
    from tests.helpers import make_member

    await make_member(client, "alice")
    await client.post(
        "/api/v1/memories",
        json={"text": "Alice secret: the vault code is 1234", "scope": "pair:bob:bot"},
        headers=ADMIN,
    )
    key = auth(await make_key(client, kind="personal", member="alice", scopes=["memory:read"]))
    out = await search(client, {"user_id": "default", "query": "vault code secret"}, headers=key)
    assert all("vault" not in m["content"] for m in out["memories"])


async def test_verify_passes_add_new_memories_only(
    client: Client, db_url: str, embedder: SentenceTransformerEmbedder
) -> None:
    await seed(
        client,
        db_url,
        embedder,
        [{"text": f"Caroline note {i}: she painted a sunset at the lake"} for i in range(12)],
    )
    out = await search(
        client,
        {"user_id": "default", "query": "what did Caroline paint?", "max_results": 5, "verify": 3},
    )
    ids = [m["id"] for m in out["memories"]]
    assert len(ids) == len(set(ids))
    assert 0 <= out["verify_used"] <= 3
    assert len(ids) == 5 * (1 + out["verify_used"]) or out["verify_used"] < 3
    zero = await search(
        client, {"user_id": "default", "query": "what did Caroline paint?", "verify": 0}
    )
    assert "verify_used" not in zero  # present only when verify > 0 was sent


async def test_verify_stops_early_when_nothing_is_left(
    client: Client, db_url: str, embedder: SentenceTransformerEmbedder
) -> None:
    await seed(client, db_url, embedder, [{"text": f"Only fact {i}"} for i in range(7)])
    out = await search(
        client, {"user_id": "default", "query": "fact", "max_results": 5, "verify": 3}
    )
    assert out["verify_used"] == 1  # the second pass found the last two, the third nothing
    assert len(out["memories"]) == 7


# --- cache and usage ----------------------------------------------------------------------


async def cached_search(client: Client, body: dict[str, Any]) -> tuple[str, float, dict[str, Any]]:
    resp = await client.post(URL, json=body, headers=ADMIN)
    assert resp.status == 200, await resp.text()
    return resp.headers["X-Cache"], float(resp.headers["X-Usage-Units"]), await resp.json()


async def test_cache_write_hit_extension_and_invalidation(
    client: Client, facts: list[str], embedder: SentenceTransformerEmbedder
) -> None:
    query = "what does alice drink"
    body: dict[str, Any] = {"user_id": "default", "query": query, "max_results": 5,
                            "cache_control": {"type": "ephemeral", "ttl": "5m"}}  # fmt: skip
    q_tokens = embedder.count_tokens(query)
    state, units, first = await cached_search(client, body)
    result_tokens = sum(
        embedder.count_tokens(m["content"])
        for key in ("memories", "self_memories", "images")
        for m in first[key]
    )
    assert state == "write"
    assert units == pytest.approx(2 * q_tokens + result_tokens, abs=1e-3)
    state, units, again = await cached_search(client, body)
    assert (state, again) == ("hit", first)
    assert units == pytest.approx(0.1 * (q_tokens + result_tokens), abs=1e-3)
    # A query that extends the cached one is answered fresh and replaces the entry.
    longer = {**body, "query": query + " in the morning"}
    state, units, ext = await cached_search(client, longer)
    new_tokens = embedder.count_tokens(longer["query"])
    ext_results = sum(
        embedder.count_tokens(m["content"])
        for key in ("memories", "self_memories", "images")
        for m in ext[key]
    )
    assert state == "write"
    assert units == pytest.approx(
        0.1 * q_tokens + 2 * (new_tokens - q_tokens) + ext_results, abs=1e-3
    )
    assert (await cached_search(client, longer))[0] == "hit"
    assert (await cached_search(client, body))[0] == "write"  # the entry now holds the other query
    # Other options are another cache slot; 1h bills 3x.
    state, units, _ = await cached_search(
        client, {**body, "max_results": 6, "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    )
    assert state == "write" and units >= 3 * q_tokens
    # Any write to the store invalidates at once.
    assert (await cached_search(client, body))[0] == "hit"
    await client.post("/api/v1/memories", json={"text": "Alice now drinks tea."}, headers=ADMIN)
    assert (await cached_search(client, body))[0] == "write"


async def test_an_extension_with_fewer_tokens_bills_no_new_part(
    client: Client, facts: list[str], embedder: SentenceTransformerEmbedder
) -> None:
    """The tokenizer does not add up: "alice drin" is more tokens than "alice drink". The
    cached part is billed at most as the whole query, the new part never below nothing."""
    short, whole = "what does alice drin", "what does alice drink"
    assert embedder.count_tokens(short) > embedder.count_tokens(whole)
    body: dict[str, Any] = {"user_id": "default", "query": short, "max_results": 5,
                            "cache_control": {"type": "ephemeral", "ttl": "5m"}}  # fmt: skip
    assert (await cached_search(client, body))[0] == "write"
    state, units, out = await cached_search(client, {**body, "query": whole})
    results = sum(
        embedder.count_tokens(m["content"])
        for key in ("memories", "self_memories", "images")
        for m in out[key]
    )
    assert state == "write" and out["memories"]
    assert units == pytest.approx(0.1 * embedder.count_tokens(whole) + results, abs=1e-3)


async def test_registering_or_removing_a_speaker_invalidates_cached_answers(
    client: Client, facts: list[str]
) -> None:
    # A question naming a registered speaker favours their memories: another answer.
    body: dict[str, Any] = {"user_id": "default", "query": "what did John say about tea",
                            "cache_control": {"type": "ephemeral", "ttl": "5m"}}  # fmt: skip
    speakers = "/api/v1/stores/default/speakers"
    assert (await cached_search(client, body))[0] == "write"
    assert (await cached_search(client, body))[0] == "hit"
    resp = await client.post(speakers, json={"name": "John"}, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    assert (await cached_search(client, body))[0] == "write"
    assert (await cached_search(client, body))[0] == "hit"
    resp = await client.delete(f"{speakers}/John", headers=ADMIN)
    assert resp.status == 204, await resp.text()
    assert (await cached_search(client, body))[0] == "write"


async def test_a_cache_hit_is_answered_while_the_model_is_loading(
    client: Client, facts: list[str]
) -> None:
    """SPEC §3.3: a hit returns the stored answer without embedding or retrieval, so it
    needs no model; anything else waits for it (503 with Retry-After)."""
    body: dict[str, Any] = {"user_id": "default", "query": "what does alice drink",
                            "cache_control": {"type": "ephemeral", "ttl": "5m"}}  # fmt: skip
    state, written_units, written = await cached_search(client, body)
    slot = client.app[EMBEDDER]
    held = slot.embedder, slot.queries
    slot.embedder, slot.queries = None, None  # as while the model loads
    try:
        state, units, hit = await cached_search(client, body)
        assert (state, hit) == ("hit", written) and 0 < units < written_units
        for other in ({**body, "query": "what does alice eat"}, {**body, "cache_control": None}):
            resp = await client.post(URL, json=other, headers=ADMIN)
            assert resp.status == 503 and resp.headers["Retry-After"] == "5"
    finally:
        slot.embedder, slot.queries = held


async def test_a_cached_answer_carries_the_warnings_of_the_request_that_reads_it(
    client: Client, facts: list[str]
) -> None:
    """Unknown filter keys are left out of the cache key, so a request with a typo hits
    the entry another request wrote: each sees its own warnings, never the other's."""
    body: dict[str, Any] = {"user_id": "default", "query": "what does alice drink",
                            "cache_control": {"type": "ephemeral", "ttl": "5m"}}  # fmt: skip
    typo = {**body, "filters": {"categry": "prefs"}}
    state, _, written = await cached_search(client, typo)
    assert state == "write" and any("categry" in w for w in written["warnings"])
    state, _, clean = await cached_search(client, body)
    assert state == "hit" and "warnings" not in clean
    assert clean["memories"] == written["memories"]
    state, _, again = await cached_search(client, {**typo, "filters": {"catgory": "x"}})
    assert state == "hit" and again["warnings"] == [
        w.replace("categry", "catgory") for w in written["warnings"]
    ]


async def test_without_cache_control_it_is_a_miss_billed_once(
    client: Client, facts: list[str], embedder: SentenceTransformerEmbedder
) -> None:
    state, units, out = await cached_search(
        client, {"user_id": "default", "query": "deploy pipeline", "max_results": 5}
    )
    results = sum(
        embedder.count_tokens(m["content"])
        for key in ("memories", "self_memories", "images")
        for m in out[key]
    )
    assert state == "miss"
    assert units == pytest.approx(embedder.count_tokens("deploy pipeline") + results, abs=1e-3)


async def test_result_tokens_come_from_the_worker_or_are_counted_at_search(
    client: Client, db_url: str, conn: asyncpg.Connection, embedder: SentenceTransformerEmbedder
) -> None:
    """The worker stores each text's token count with its vector; a result it has not
    embedded yet is counted at search time. Either way the bill is the same."""
    [embedded] = await seed(
        client, db_url, embedder, [{"text": "Kestrels hover over the motorway verge"}]
    )
    text = "Kestrels nest in the old church tower, unembedded so far"
    resp = await client.post("/api/v1/memories", json={"text": text}, headers=ADMIN)
    fresh = (await resp.json())["id"]
    stored = dict(await conn.fetch("SELECT id, text_tokens FROM memories"))
    assert stored == {
        embedded: embedder.count_tokens("Kestrels hover over the motorway verge"),
        fresh: None,
    }
    state, units, out = await cached_search(
        client, {"user_id": "default", "query": "kestrels", "max_results": 5}
    )
    assert {m["id"] for m in out["memories"]} == {embedded, fresh}
    expected = embedder.count_tokens("kestrels") + sum(
        embedder.count_tokens(m["content"]) for m in out["memories"]
    )
    assert state == "miss"
    assert units == pytest.approx(expected, abs=1e-3)
    # The stored count is the one billed (not recounted): a made-up one shows through.
    await conn.execute("UPDATE memories SET text_tokens = 1000 WHERE id = $1", embedded)
    _, units, _ = await cached_search(
        client, {"user_id": "default", "query": "kestrels", "max_results": 5}
    )
    assert units == pytest.approx(
        embedder.count_tokens("kestrels") + 1000 + embedder.count_tokens(text), abs=1e-3
    )
    # A new text is counted anew.
    resp = await client.patch(
        f"/api/v1/memories/{embedded}", json={"text": "Kestrels left"}, headers=ADMIN
    )
    assert resp.status == 200, await resp.text()
    assert await conn.fetchval("SELECT text_tokens FROM memories WHERE id = $1", embedded) is None


async def test_usage_reports_billed_units_per_day_and_endpoint(
    client: Client, facts: list[str]
) -> None:
    total = 0.0
    for query in ("alice", "bob", "office"):
        _, units, _ = await cached_search(
            client, {"user_id": "default", "query": query, "max_results": 5}
        )
        total += units
    resp = await client.get("/api/v1/usage", headers=ADMIN)
    assert resp.status == 200
    [row] = (await resp.json())["data"]
    assert (row["endpoint"], row["requests"]) == ("search", 3)
    assert row["units"] == pytest.approx(total, abs=1e-3)
    assert len(row["day"]) == 10
    old = await client.get("/api/v1/usage?from=2020-01-01&to=2020-01-31", headers=ADMIN)
    assert (await old.json())["data"] == []
    bad = await client.get("/api/v1/usage?from=yesterday", headers=ADMIN)
    assert bad.status == 400
    # A timestamp names its UTC day: today's row, seen from just before midnight UTC.
    today = row["day"]
    late = quote(f"{today}T23:30:00-01:00")  # already tomorrow in UTC
    near = await client.get(f"/api/v1/usage?from={today}T00:00:00Z&to={late}", headers=ADMIN)
    assert [r["day"] for r in (await near.json())["data"]] == [today]
    after = await client.get(f"/api/v1/usage?from={late}", headers=ADMIN)
    assert (after.status, (await after.json())["data"]) == (200, [])


# --- work started while the key is checked ----------------------------------------------


async def test_only_a_key_that_checked_out_lately_gets_its_query_encoded_early(
    client: Client,
) -> None:
    encoder = client.app[EMBEDDER].queries
    assert encoder is not None

    async def ask(key: str, query: str) -> int:
        resp = await client.post(URL, json={"user_id": "default", "query": query},
                                 headers=auth(key))  # fmt: skip
        return resp.status

    # An unknown key never makes the model work, not even while it is being checked.
    calls = encoder.model_calls
    assert await ask("mneme_sk_not-a-key-at-all", "never encoded") == 401
    await asyncio.sleep(0.05)
    assert encoder.model_calls == calls and encoder.tokens("never encoded") is None
    # A key that checked out gets the same answers with its queries encoded early.
    resp = await client.post(
        "/api/v1/keys", json={"kind": "service", "scopes": ["memory:read"]}, headers=ADMIN
    )
    made = await resp.json()
    assert await ask(made["key"], "first") == 200
    assert await ask(made["key"], "second") == 200
    assert encoder.tokens("second") is not None
    # Revoked, it is refused as before (what was encoded early is just not used).
    assert (await client.delete(f"/api/v1/keys/{made['id']}", headers=ADMIN)).status == 204
    assert await ask(made["key"], "third") == 401


async def test_a_bad_body_from_a_known_key_is_still_the_handlers_400(client: Client) -> None:
    await search(client, {"user_id": "default", "query": "hello"})  # the key checks out
    for body in (b"{not json", b'{"user_id": "default"}', b'{"user_id": "-x", "query": "q"}'):
        resp = await client.post(
            URL, data=body, headers={**ADMIN, "Content-Type": "application/json"}
        )
        assert resp.status == 400, await resp.text()
        assert (await resp.json())["error"]["type"] == "invalid_request_error"


async def test_a_failed_flush_keeps_the_last_used_stamps_for_the_next(
    client: Client, db_url: str
) -> None:
    """The database fails once while the stamps of returned memories are written: they
    stay pending and land with the next flush (they were lost before)."""
    from service.ops.toucher import Toucher

    resp = await client.post("/api/v1/memories", json={"text": "Stamp me."}, headers=ADMIN)
    memory_id = (await resp.json())["id"]
    conn = await asyncpg.connect(db_url)
    try:
        workspace_id = await conn.fetchval(
            "SELECT workspace_id FROM memories WHERE id = $1", memory_id
        )
        toucher = Toucher()
        toucher.add(workspace_id, [memory_id])
        gone = await asyncpg.create_pool(db_url, min_size=1, max_size=1)
        await gone.close()  # a pool that can no longer reach the database
        with pytest.raises(asyncpg.InterfaceError):
            await toucher.flush(gone)
        assert toucher.pending == {workspace_id: {memory_id}}
        await toucher.flush(conn)
        assert toucher.pending == {}
        stamped = await conn.fetchval(
            "SELECT count(*) FROM memory_uses WHERE memory_id = $1", memory_id
        )
        assert stamped == 1
    finally:
        await conn.close()
