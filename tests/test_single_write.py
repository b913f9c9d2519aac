"""A single write takes the short path (service.write.single) and keeps every write rule.

The short path writes a memory with a providerRef in one statement and one without in a
transaction of two. What it must share with the general path (service.write.bulk, taken by a
batch, an Idempotency-Key, a path or ``supersedes``) is tried here: the same answer and
the same rows for the same request, the same identity lock, and no race between the two
paths that leaves two memories for one identity, a lost proof, or a 5xx.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import asyncpg
import pytest

from tests.helpers import ADMIN, Client

MEMORIES = "/api/v1/memories"
# What a row is compared on (ids and times differ between any two writes).
COMPARED = ("text", "scope", "tier", "factType", "status", "provider", "speaker", "eventDate",
            "category", "importance", "metadata", "entityRefs", "proofCount", "embeddingStatus",
            "deduplicated", "upserted")  # fmt: skip


@pytest.fixture
async def store(client: Client) -> str:
    resp = await client.post("/api/v1/forward/memory_stores", json={"name": "s"}, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    resp = await client.post("/api/v1/stores/s/speakers", json={"name": "Sam"}, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    return "s"


async def post(client: Client, body: dict[str, Any], **headers: str) -> tuple[int, Any]:
    resp = await client.post(MEMORIES, json=body, headers={**ADMIN, **headers})
    return resp.status, await resp.json()


def compared(answer: dict[str, Any]) -> dict[str, Any]:
    return {name: answer.get(name) for name in COMPARED}


async def versions(client: Client, memory_id: str) -> list[str]:
    resp = await client.get(f"{MEMORIES}/{memory_id}/versions", headers=ADMIN)
    return [v["operation"] for v in (await resp.json())["data"]]


@pytest.mark.parametrize(
    "body",
    [
        {"text": "Sam moved to Lisbon.", "speaker": "Sam", "eventDate": "2024-05-01T10:00:00Z",
         "providerRef": "D1:3", "metadata": {"k": "v"}, "entityRefs": ["lisbon"]},
        {"text": "Sam moved to Lisbon.", "speaker": "me", "tier": "core", "factType": "world",
         "importance": 0.9, "category": "travel"},
        {"text": "Sam moved to Lisbon.", "provider": "sync", "providerRef": "x", "proofCount": 3},
    ],
)  # fmt: skip
async def test_the_short_path_answers_as_the_general_path(
    client: Client, store: str, body: dict[str, Any]
) -> None:
    # The same request, once alone (the short path) and once as a batch of one (the general
    # path), each into a store of its own: the same answer, the same versions; then each
    # again: a duplicate or an upsert in both.
    resp = await client.post("/api/v1/forward/memory_stores", json={"name": "t"}, headers=ADMIN)
    assert resp.status == 201
    resp = await client.post("/api/v1/stores/t/speakers", json={"name": "Sam"}, headers=ADMIN)
    assert resp.status == 201
    for round_ in ("created", "again"):
        status, alone = await post(client, {**body, "store": "s"})
        resp = await client.post(
            MEMORIES, json={"memories": [{**body, "store": "t"}]}, headers=ADMIN
        )
        assert resp.status == 200, await resp.text()
        batched = (await resp.json())["memories"][0]
        assert status == (201 if round_ == "created" else 200), alone
        assert compared(alone) == compared(batched)
        assert await versions(client, alone["id"]) == await versions(client, batched["id"])
    assert alone["deduplicated"] or alone["upserted"]


async def test_refusals_are_the_general_paths_word_for_word(client: Client, store: str) -> None:
    cases = [
        {"text": "x", "store": "nowhere"},
        {"text": "x", "store": "nowhere", "providerRef": "r"},
        {"text": "x", "store": "s", "speaker": "Nobody"},
        {"text": "x", "store": "s", "speaker": "Nobody", "providerRef": "r"},
    ]
    for body in cases:
        status, alone = await post(client, body)
        resp = await client.post(MEMORIES, json={"memories": [body]}, headers=ADMIN)
        batched = await resp.json()
        assert status == resp.status == 404, alone
        assert f"memories[0]: {alone['error']['message']}" == batched["error"]["message"]
    resp = await client.get(MEMORIES, headers=ADMIN)
    assert (await resp.json())["data"] == []


async def test_the_lock_key_is_the_one_python_computed(conn: asyncpg.Connection) -> None:
    # Instances on either side of migration 0011 lock each other out only if the key is
    # the same: the first 8 bytes of the sha256 of the parts joined by U+001F, signed.
    for parts in [("ws_1", "memstore_1", "mneme", "D1:3"), ("ws", "s", "", "ab" * 32),
                  ("wś", "ストア", "sync", "\U0001f600 ref")]:  # fmt: skip
        digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()
        expected = int.from_bytes(digest[:8], "big", signed=True)
        assert await conn.fetchval("SELECT mneme_identity_key($1, $2, $3, $4)", *parts) == expected


@pytest.mark.parametrize("synced", [True, False])
async def test_a_single_write_waits_for_the_identity_lock(
    client: Client, conn: asyncpg.Connection, store: str, synced: bool
) -> None:
    # The lock the general path takes (a transaction holding it here) holds the short
    # path back until it is released: neither can decide the identity under the other.
    text = "Sam likes figs."
    workspace, store_id = await conn.fetchrow(
        "SELECT workspace_id, id FROM stores WHERE name = 's'"
    )
    provider, ref = ("mneme", "D9") if synced else ("", hashlib.sha256(text.encode()).hexdigest())
    body = {"text": text, "store": "s", **({"providerRef": "D9"} if synced else {})}
    async with conn.transaction():
        await conn.execute(
            "SELECT pg_advisory_xact_lock(mneme_identity_key($1, $2, $3, $4))",
            workspace, store_id, provider, ref,
        )  # fmt: skip
        pending = asyncio.ensure_future(post(client, body))
        await asyncio.sleep(0.5)
        assert not pending.done()
    status, answer = await pending
    assert status == 201, answer


async def test_racing_writes_of_one_identity_leave_one_memory(
    client: Client, conn: asyncpg.Connection, store: str
) -> None:
    # Single writes (the short path), batches and replayable writes (the general path) of
    # one providerRef and of one text, all at once: one memory each, every write counted.
    async def alone(i: int) -> int:
        return (await post(client, {"text": f"version {i}", "store": "s", "providerRef": "r"}))[0]

    async def plain() -> int:
        return (await post(client, {"text": "Sam is tall.", "store": "s", "speaker": "Sam"}))[0]

    async def batch(i: int) -> int:
        items = [{"text": f"batch {i}", "store": "s", "providerRef": "r"},
                 {"text": "Sam is tall.", "store": "s", "speaker": "Sam"}]  # fmt: skip
        resp = await client.post(MEMORIES, json={"memories": items}, headers=ADMIN)
        return resp.status

    async def replayable(i: int) -> int:
        body = {"text": "Sam is tall.", "store": "s", "speaker": "Sam"}
        return (await post(client, body, **{"Idempotency-Key": f"k{i}"}))[0]

    statuses = await asyncio.gather(
        *(alone(i) for i in range(6)), *(plain() for _ in range(6)),
        *(batch(i) for i in range(3)), *(replayable(i) for i in range(3)),
    )  # fmt: skip
    assert set(statuses) <= {200, 201}, statuses
    synced = await conn.fetch("SELECT id FROM memories WHERE provider_ref = 'r'")
    assert len(synced) == 1
    # Nine writes of nine texts: made by the first, changed by each of the others.
    assert await versions(client, synced[0]["id"]) == ["modified"] * 8 + ["created"]
    tall = await conn.fetch("SELECT proof_count FROM memories WHERE text = 'Sam is tall.'")
    # One memory; its first write made it, each of the other 11 added a proof.
    assert [r["proof_count"] for r in tall] == [12]
