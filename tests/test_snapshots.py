"""Search snapshots (service/retrieval/snapshots.py): a small store ranked from memory answers
exactly as the SQL arms do, for every reader, and never outlives a change.

Two apps share one database: one with snapshots (the default), one without, so every
answer is compared with the SQL arms' own on the same rows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from embeddings.model import SentenceTransformerEmbedder
from service.app_keys import METRICS, POOL, SNAPSHOTS
from service.queries import keys
from service.settings import Settings
from tests.helpers import (
    ADMIN,
    BOOTSTRAP_KEY,
    PNG,
    Client,
    auth,
    make_key,
    make_member,
    search,
    seed,
    wait_for,
)

Make = Callable[[Settings], Awaitable[Client]]

MEMORIES: list[dict[str, Any]] = [
    {"text": "The team lunch is on Thursday at the Thai place.", "importance": 0.9},
    {"text": "Alice prefers window seats on long flights.", "scope": "pair:alice:bot"},
    {"text": "Bob booked the flights to Lisbon for the offsite.", "scope": "pair:bob:bot"},
    {"text": "The offsite in Lisbon starts on a Monday.", "scope": "room:ops"},
    {"text": "Ops rotates the on-call pager every Thursday.", "scope": "room:ops",
     "category": "ops"},
    {"text": "Flights over six hours need manager approval.", "category": "policy"},
    {"text": "I booked a table for the team lunch.", "speaker": "me"},
    {"text": "A photo of the Lisbon office", "image": {"data": PNG, "mimeType": "image/png"}},
    {"text": "The old travel policy allowed business class.", "category": "policy"},
    {"text": "Lunch on Thursdays used to be pizza.", "importance": 0.2},
]  # fmt: skip

QUERIES = ["Thursday lunch", "flights to Lisbon", "travel policy", "who holds the pager",
           # More words than the full-text arm takes (the rarest 32, in both paths).
           " ".join(m["text"] for m in MEMORIES)]  # fmt: skip

FILTERS: list[dict[str, Any] | None] = [
    None, {"category": "policy"}, {"include_superseded": False}, {"min_importance": 0.5},
]  # fmt: skip


def retrievals(client: Client, path: str) -> float:
    value = client.app[METRICS].registry.get_sample_value(
        "mneme_search_retrievals_total", {"path": path}
    )
    return value or 0.0


@pytest.fixture
async def pair(
    make_client: Make, settings: Settings, db_url: str, embedder: SentenceTransformerEmbedder
) -> tuple[Client, Client, dict[str, dict[str, str]]]:
    """The app with snapshots, one without, and the readers' headers; the rows seeded,
    embedded, and the snapshot read."""
    with_snapshots = await make_client(settings)
    without = await make_client(settings.with_overrides(snapshot_bytes=0))
    for member in ("alice", "bob"):
        await make_member(with_snapshots, member)
    resp = await with_snapshots.post(
        "/api/v1/rooms", json={"id": "ops", "members": ["alice"]}, headers=ADMIN
    )
    assert resp.status == 201
    ids = await seed(with_snapshots, db_url, embedder, MEMORIES)
    # The old travel policy, superseded.
    await seed(with_snapshots, db_url, embedder, [
        {"text": "Travel policy: economy class on every flight.", "supersedes": ids[8]}
    ])  # fmt: skip
    readers = {
        "service": ADMIN,
        "alice": auth(await make_key(with_snapshots, kind="personal", member="alice",
                                     scopes=["memory:read"])),
        "bob": auth(await make_key(with_snapshots, kind="personal", member="bob",
                                   scopes=["memory:read"])),
    }  # fmt: skip
    await search(with_snapshots, {"user_id": "default", "query": "warm up"})
    await with_snapshots.app[SNAPSHOTS].settled()
    return with_snapshots, without, readers


def shown(out: dict[str, Any]) -> dict[str, list[tuple[str, float]]]:
    return {
        part: [(m["id"], round(m["similarity"], 4)) for m in out.get(part, [])]
        for part in ("memories", "self_memories", "images")
    }


async def test_snapshot_answers_are_the_sql_arms_answers_for_every_reader_and_filter(
    pair: tuple[Client, Client, dict[str, dict[str, str]]],
) -> None:
    with_snapshots, without, readers = pair
    sql_before = retrievals(with_snapshots, "sql")
    for query in QUERIES:
        for name, headers in readers.items():
            for filters in FILTERS:
                for model in ("Tablet 2", "Scroll 1.2"):
                    body: dict[str, Any] = {"user_id": "default", "query": query,
                                            "max_results": 5}  # fmt: skip
                    if filters is not None:
                        body["filters"] = filters
                    mine = await search(with_snapshots, body, headers=headers, model=model)
                    theirs = await search(without, body, headers=headers, model=model)
                    assert shown(mine) == shown(theirs), (query, name, filters, model)
    # Unfiltered retrievals came from the snapshot alone, filtered ones were checked in
    # SQL, and none fell back to the SQL arms; the other app used nothing else.
    assert retrievals(with_snapshots, "snapshot") >= len(QUERIES) * len(readers) * 2
    assert retrievals(with_snapshots, "checked") >= len(QUERIES) * len(readers) * 2 * 3
    assert retrievals(with_snapshots, "sql") == sql_before
    assert retrievals(without, "snapshot") == retrievals(without, "checked") == 0


async def test_a_snapshot_candidate_links_the_memory_written_before_it_as_sql_does(
    pair: tuple[Client, Client, dict[str, dict[str, str]]],
) -> None:
    with_snapshots, _, _ = pair
    pool = with_snapshots.app[POOL]
    workspace = await keys.key_workspace(pool, BOOTSTRAP_KEY)
    assert workspace is not None
    snap = with_snapshots.app[SNAPSHOTS].guess(workspace, "default")
    assert snap is not None
    linked = {r["id"]: r["written_after"] for r in await pool.fetch(
        "SELECT id, written_after FROM memories WHERE workspace_id = $1", workspace)}  # fmt: skip
    got = {
        snap.ids[row]: snap.candidate(row, record, None, False, None).written_after
        for row, record in enumerate(snap.rows)
    }
    assert got == {i: linked[i] for i in snap.ids}
    # Each scope is its own run in write order: the room's second memory follows its
    # first, Alice's one memory follows none, the workspace's follow one another.
    by_text = {r["text"]: r["id"] for r in snap.rows}
    offsite = by_text["The offsite in Lisbon starts on a Monday."]
    pager = by_text["Ops rotates the on-call pager every Thursday."]
    assert got[offsite] is None and got[pager] == offsite
    assert got[by_text["Alice prefers window seats on long flights."]] is None
    lunch = by_text["The team lunch is on Thursday at the Thai place."]
    approval = by_text["Flights over six hours need manager approval."]
    assert got[lunch] is None and got[approval] == lunch


async def test_a_reader_never_gets_a_memory_of_a_scope_it_cannot_read(
    pair: tuple[Client, Client, dict[str, dict[str, str]]],
) -> None:
    with_snapshots, _, readers = pair

    async def contents(headers: dict[str, str], query: str) -> set[str]:
        out = await search(with_snapshots, {"user_id": "default", "query": query,
                                            "max_results": 20}, headers=headers)  # fmt: skip
        return {m["content"] for m in out["memories"]}

    before = retrievals(with_snapshots, "snapshot"), retrievals(with_snapshots, "sql")
    seen_by = {name: await contents(h, "flights to Lisbon") for name, h in readers.items()}
    # All from the snapshot: three retrievals each (memories, self, images).
    assert retrievals(with_snapshots, "snapshot") == before[0] + 9
    assert retrievals(with_snapshots, "sql") == before[1]
    alice_only = "Alice prefers window seats on long flights."
    bob_only = "Bob booked the flights to Lisbon for the offsite."
    ops_only = "The offsite in Lisbon starts on a Monday."
    assert {alice_only, bob_only, ops_only} <= seen_by["service"]
    assert alice_only in seen_by["alice"] and ops_only in seen_by["alice"]
    assert bob_only not in seen_by["alice"]
    assert bob_only in seen_by["bob"]
    assert alice_only not in seen_by["bob"] and ops_only not in seen_by["bob"]

    # Leaving the room changes no memory and so not the store's version: the snapshot
    # stays, and it is the SQL rule, asked again per request, that stops the room's rows.
    resp = await with_snapshots.delete("/api/v1/rooms/ops/members/alice", headers=ADMIN)
    assert resp.status == 200
    after = await contents(readers["alice"], "flights to Lisbon")
    assert ops_only not in after and alice_only in after
    assert retrievals(with_snapshots, "snapshot") == before[0] + 12


async def test_a_change_to_the_store_is_seen_by_the_next_search(
    pair: tuple[Client, Client, dict[str, dict[str, str]]],
) -> None:
    with_snapshots, _, _ = pair
    body = {"user_id": "default", "query": "parking garage permits", "max_results": 5}
    text = "Parking garage permits are renewed every January."
    resp = await with_snapshots.post("/api/v1/memories", json={"text": text}, headers=ADMIN)
    assert resp.status == 201
    new_id = (await resp.json())["id"]
    sql_before = retrievals(with_snapshots, "sql")
    out = await search(with_snapshots, body)
    assert out["memories"][0]["id"] == new_id  # found at once, by the SQL arms
    assert retrievals(with_snapshots, "sql") == sql_before + 3  # memories, self, images
    await with_snapshots.app[SNAPSHOTS].settled()

    resp = await with_snapshots.delete(f"/api/v1/memories/{new_id}", headers=ADMIN)
    assert resp.status == 200
    out = await search(with_snapshots, body)
    assert new_id not in {m["id"] for m in out["memories"]}


async def test_the_memory_cap_bounds_what_is_held(
    make_client: Make, settings: Settings, db_url: str, embedder: SentenceTransformerEmbedder
) -> None:
    small = await make_client(settings.with_overrides(snapshot_bytes=4096))
    await seed(small, db_url, embedder, MEMORIES)
    out = await search(small, {"user_id": "default", "query": "Thursday lunch"})
    await small.app[SNAPSHOTS].settled()
    again = await search(small, {"user_id": "default", "query": "Thursday lunch"})
    assert small.app[SNAPSHOTS].held_bytes == 0  # ten memories take more than 4 KiB
    assert shown(again) == shown(out)
    assert retrievals(small, "snapshot") == retrievals(small, "checked") == 0


async def test_an_erasure_drops_the_snapshots_holding_its_text_on_every_process(
    make_client: Make, settings: Settings, db_url: str, embedder: SentenceTransformerEmbedder
) -> None:
    erasing, other = await make_client(settings), await make_client(settings)
    resp = await erasing.post(
        "/api/v1/stores/default/speakers", json={"name": "Caroline"}, headers=ADMIN
    )
    assert resp.status == 201
    await seed(erasing, db_url, embedder, [
        {"text": "Caroline walks Zephyrine the greyhound at dawn.", "speaker": "Caroline"},
        {"text": "The team lunch is on Thursday at the Thai place."},
    ])  # fmt: skip
    workspace = await keys.key_workspace(erasing.app[POOL], BOOTSTRAP_KEY)
    assert workspace is not None

    def holds_her(client: Client) -> bool:
        snap = client.app[SNAPSHOTS].guess(workspace, "default")
        return snap is not None and any("Zephyrine" in r["text"] for r in snap.rows)

    body = {"user_id": "default", "query": "greyhound Zephyrine", "max_results": 5}
    for client in (erasing, other):
        await search(client, body)
        await client.app[SNAPSHOTS].settled()
        assert holds_her(client)

    resp = await erasing.post(
        "/api/v1/erasures", json={"speaker": "Caroline", "store": "default"}, headers=ADMIN
    )
    assert resp.status == 200, await resp.text()
    # At once where it was made; within a second on every other process, before any
    # search there (each checks its snapshots' store versions).
    assert not holds_her(erasing)

    async def dropped() -> bool:
        return not holds_her(other)

    await wait_for(dropped, 5, "the other process dropping the erased text")
    for client in (erasing, other):
        out = await search(client, body)
        await client.app[SNAPSHOTS].settled()
        assert "Zephyrine" not in str(out) and not holds_her(client)
