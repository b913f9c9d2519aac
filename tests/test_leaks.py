"""No memory leaves the service for a key that cannot read it (SPEC §9).

Every test here uses two personal keys of one workspace that see different things:
alice is in room ``ops``, bob is not. Each exit a memory could take — a cached search
answer, a sync upsert, an idempotency replay, an error message, a count — is tried with
the key that must not see it.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from service.app_keys import POOL, TOUCHER
from tests.helpers import ADMIN, BOOTSTRAP_KEY, Client, auth, connected, make_key, make_member

SEARCH = "/api/v1/memory/search"
SECRET_TEXT = "The ops room rotates the payroll database password every Tuesday."
CACHED: dict[str, Any] = {"type": "ephemeral", "ttl": "5m"}


@pytest.fixture
async def keys(client: Client) -> dict[str, str]:
    """alice (in room ops) and bob (not), both personal keys that read and write."""
    await make_member(client, "alice")
    await make_member(client, "bob")
    resp = await client.post(
        "/api/v1/rooms", json={"id": "ops", "members": ["alice"]}, headers=ADMIN
    )
    assert resp.status == 201
    scopes = ["memory:read", "memory:write"]
    return {
        "alice": await make_key(client, kind="personal", member="alice", scopes=scopes),
        "bob": await make_key(client, kind="personal", member="bob", scopes=scopes),
    }


async def write(client: Client, key: str, body: dict[str, Any], status: int = 201) -> Any:
    resp = await client.post("/api/v1/memories", json=body, headers=auth(key))
    assert resp.status == status, await resp.text()
    return await resp.json()


async def cached_search(client: Client, key: str, query: str) -> tuple[str, list[str]]:
    body = {"user_id": "default", "query": query, "max_results": 5, "cache_control": CACHED}
    resp = await client.post(SEARCH, json=body, headers=auth(key))
    assert resp.status == 200, await resp.text()
    out = await resp.json()
    ids = [m["id"] for part in ("memories", "self_memories", "images") for m in out[part]]
    return resp.headers["X-Cache"], ids


async def test_a_member_of_many_rooms_gets_cached_answers_too(
    client: Client, keys: dict[str, str]
) -> None:
    # The reader is kept as a hash: a member of many long-named rooms would not fit an
    # index entry as text.
    for i in range(60):
        room = {"id": f"room-{i:02d}-" + "x" * 55, "members": ["alice"]}
        assert (await client.post("/api/v1/rooms", json=room, headers=ADMIN)).status == 201
    secret = (await write(client, keys["alice"], {"text": SECRET_TEXT, "scope": "room:ops"}))["id"]
    alice = keys["alice"]
    assert await cached_search(client, alice, "payroll password") == ("write", [secret])
    assert await cached_search(client, alice, "payroll password") == ("hit", [secret])


# --- the search cache -------------------------------------------------------------------------


async def test_a_cached_answer_is_never_served_to_a_key_that_sees_less(
    client: Client, keys: dict[str, str]
) -> None:
    secret = (await write(client, keys["alice"], {"text": SECRET_TEXT, "scope": "room:ops"}))["id"]
    public = (await write(client, keys["alice"], {"text": "Payroll runs on the 25th."}))["id"]
    query = "when is the payroll password rotated"

    assert await cached_search(client, keys["alice"], query) == ("write", [secret, public])
    assert await cached_search(client, keys["alice"], query) == ("hit", [secret, public])
    # bob asks the same with the same options: computed for him, without the room's memory.
    assert await cached_search(client, keys["bob"], query) == ("write", [public])
    assert await cached_search(client, keys["bob"], query) == ("hit", [public])
    # ...and alice still gets her own answer, not bob's narrower one.
    assert await cached_search(client, keys["alice"], query) == ("hit", [secret, public])


async def test_a_key_that_sees_more_never_gets_the_narrower_cached_answer(
    client: Client, keys: dict[str, str]
) -> None:
    secret = (await write(client, keys["alice"], {"text": SECRET_TEXT, "scope": "room:ops"}))["id"]
    query = "payroll database password"
    assert await cached_search(client, keys["bob"], query) == ("write", [])
    assert await cached_search(client, keys["alice"], query) == ("write", [secret])
    # The service key reads everything: an entry of its own as well.
    state, ids = await cached_search(client, ADMIN["Authorization"][7:], query)
    assert (state, ids) == ("write", [secret])


async def test_joining_a_room_is_a_different_reader(client: Client, keys: dict[str, str]) -> None:
    secret = (await write(client, keys["alice"], {"text": SECRET_TEXT, "scope": "room:ops"}))["id"]
    query = "payroll database password"
    assert await cached_search(client, keys["bob"], query) == ("write", [])
    resp = await client.put("/api/v1/rooms/ops/members/bob", headers=ADMIN)
    assert resp.status == 200
    assert await cached_search(client, keys["bob"], query) == ("write", [secret])
    resp = await client.delete("/api/v1/rooms/ops/members/bob", headers=ADMIN)
    assert resp.status == 200
    assert await cached_search(client, keys["bob"], query) == ("hit", [])


async def test_last_used_is_stamped_only_for_what_the_reader_was_given(
    client: Client, keys: dict[str, str], conn: asyncpg.Connection
) -> None:
    secret = (await write(client, keys["alice"], {"text": SECRET_TEXT, "scope": "room:ops"}))["id"]
    public = (await write(client, keys["alice"], {"text": "Payroll runs on the 25th."}))["id"]
    query = "when is the payroll password rotated"
    assert (await cached_search(client, keys["alice"], query))[0] == "write"
    await client.app[TOUCHER].flush(client.app[POOL])
    await conn.execute("DELETE FROM memory_uses")
    # bob's miss and bob's hit stamp only what bob was given.
    assert (await cached_search(client, keys["bob"], query))[0] == "write"
    assert (await cached_search(client, keys["bob"], query))[0] == "hit"
    await client.app[TOUCHER].flush(client.app[POOL])
    stamped = {r["memory_id"] for r in await conn.fetch("SELECT memory_id FROM memory_uses")}
    assert stamped == {public}
    assert secret not in stamped


# --- sync upserts -------------------------------------------------------------------------------


async def test_an_upsert_cannot_take_over_a_memory_the_caller_cannot_read(
    client: Client, keys: dict[str, str]
) -> None:
    private = {"text": SECRET_TEXT, "scope": "pair:alice:carol", "provider": "sync",
               "providerRef": "r1"}  # fmt: skip
    original = await write(client, keys["alice"], private)
    attempts: list[dict[str, Any]] = [
        {"provider": "sync", "providerRef": "r1", "scope": "workspace"},
        {"provider": "sync", "providerRef": "r1", "scope": "workspace", "text": "pwned"},
        {"provider": "sync", "providerRef": "r1", "text": "pwned"},  # no scope: keep the stored one
        {"provider": "sync", "providerRef": "r1", "category": "x"},
    ]
    for body in attempts:
        resp = await client.post("/api/v1/memories", json=body, headers=auth(keys["bob"]))
        assert resp.status == 409, await resp.text()
        message = (await resp.json())["error"]["message"]
        for leaked in ("pair", "alice", "carol", "payroll", original["id"]):
            assert leaked not in message.lower(), message
        # A batch refuses the same way, naming its index and nothing more.
        resp = await client.post(
            "/api/v1/memories", json={"memories": [body]}, headers=auth(keys["bob"])
        )
        assert resp.status == 409
        assert "pair" not in (await resp.json())["error"]["message"]

    stored = await (await client.get(f"/api/v1/memories/{original['id']}", headers=ADMIN)).json()
    assert (stored["scope"], stored["text"], stored["category"]) == (
        "pair:alice:carol", SECRET_TEXT, "general"
    )  # fmt: skip
    versions = await client.get(f"/api/v1/memories/{original['id']}/versions", headers=ADMIN)
    assert len((await versions.json())["data"]) == 1
    # The owner still upserts it as before.
    again = await write(client, keys["alice"], {**private, "category": "secrets"}, status=200)
    assert again["upserted"] and again["category"] == "secrets"


async def test_a_memory_id_passed_as_provider_ref_reveals_nothing(
    client: Client, keys: dict[str, str]
) -> None:
    # A memory's providerRef defaults to its own id (provider 'mneme'): any id passed as
    # providerRef names it. The answer used to be a 403 naming its pair scope.
    other = await write(client, keys["alice"], {"text": SECRET_TEXT, "scope": "pair:alice:carol"})
    for body in ({"text": "x", "providerRef": other["id"]}, {"providerRef": other["id"]}):
        resp = await client.post("/api/v1/memories", json=body, headers=auth(keys["bob"]))
        assert resp.status == 409, await resp.text()
        message = (await resp.json())["error"]["message"]
        assert "pair" not in message and "carol" not in message and "payroll" not in message
    # Refused for a scope of its own, bob is told about his own request only.
    resp = await client.post(
        "/api/v1/memories",
        json={"text": "x", "providerRef": other["id"], "scope": "room:ops"},
        headers=auth(keys["bob"]),
    )
    assert resp.status == 403
    assert "pair" not in (await resp.json())["error"]["message"]


# --- idempotency --------------------------------------------------------------------------------


async def test_an_idempotency_key_belongs_to_the_api_key_that_used_it(
    client: Client, keys: dict[str, str], conn: asyncpg.Connection
) -> None:
    body = {"text": SECRET_TEXT, "scope": "room:ops"}
    headers = {"Idempotency-Key": "retry-1"}
    first = await client.post(
        "/api/v1/memories", json=body, headers={**auth(keys["alice"]), **headers}
    )
    assert first.status == 201
    # bob with the same header and body: a new request, checked like one (bob cannot
    # write into room:ops), never the first response.
    resp = await client.post(
        "/api/v1/memories", json=body, headers={**auth(keys["bob"]), **headers}
    )
    assert resp.status == 403
    assert "Idempotent-Replayed" not in resp.headers
    assert SECRET_TEXT not in await resp.text()
    # bob with a body he may write: his own request (here folded into alice's duplicate,
    # which he can read), not a replay of anything.
    public = {"text": "Payroll runs on the 25th."}
    await write(client, keys["alice"], public)
    resp = await client.post(
        "/api/v1/memories", json=public, headers={**auth(keys["bob"]), **headers}
    )
    assert resp.status == 200 and (await resp.json())["deduplicated"]
    assert "Idempotent-Replayed" not in resp.headers
    # alice's retry is still replayed, and nothing was written twice.
    again = await client.post(
        "/api/v1/memories", json=body, headers={**auth(keys["alice"]), **headers}
    )
    assert again.status == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert await again.json() == await first.json()
    count = await conn.fetchval("SELECT count(*) FROM memories WHERE text = $1", SECRET_TEXT)
    assert count == 1


async def test_a_replay_is_refused_once_its_memory_is_out_of_reach(
    client: Client, keys: dict[str, str]
) -> None:
    """A replay is an exit too: alice, out of room ops, no longer gets its memory back
    by retrying the write that made it."""
    headers = {**auth(keys["alice"]), "Idempotency-Key": "retry-2"}
    body = {"text": SECRET_TEXT, "scope": "room:ops"}
    first = await client.post("/api/v1/memories", json=body, headers=headers)
    assert first.status == 201
    assert (await client.delete("/api/v1/rooms/ops/members/alice", headers=ADMIN)).status == 200
    again = await client.post("/api/v1/memories", json=body, headers=headers)
    assert again.status == 409 and "Idempotent-Replayed" not in again.headers
    assert SECRET_TEXT not in await again.text()


async def test_a_purge_reaches_replays_cached_answers_and_supersession(
    client: Client, conn: asyncpg.Connection
) -> None:
    """SPEC §3.1: a purge erases the memory for good, so no stored copy of it survives:
    neither an Idempotency-Key's answer nor a cached search answer; and the memory it
    superseded names it no more."""
    old = await write(client, BOOTSTRAP_KEY, {"text": "The vault code is 1234."})
    headers = {**ADMIN, "Idempotency-Key": "purged-1"}
    body = {"text": SECRET_TEXT, "supersedes": old["id"]}
    made = await client.post("/api/v1/memories", json=body, headers=headers)
    assert made.status == 201
    secret = (await made.json())["id"]
    assert secret in (await cached_search(client, BOOTSTRAP_KEY, "payroll password"))[1]
    resp = await client.delete(f"/api/v1/memories/{secret}?purge=true", headers=ADMIN)
    assert resp.status == 200
    for table in ("idempotency_keys", "search_cache"):
        held = await conn.fetchval(
            f"SELECT count(*) FROM {table} WHERE $1 = ANY(memory_ids)", secret
        )
        assert held == 0, table
    resp = await client.get(f"/api/v1/memories/{old['id']}", headers=ADMIN)
    assert (await resp.json())["supersededBy"] is None
    # The key's record went with it: a retry now is a new write, not the purged answer.
    again = await client.post("/api/v1/memories", json=body, headers=headers)
    assert again.status == 201 and "Idempotent-Replayed" not in again.headers
    assert (await again.json())["id"] != secret


async def test_a_room_note_cannot_demote_what_others_read(
    client: Client, keys: dict[str, str]
) -> None:
    """alice (in ops) may not supersede a workspace fact with a room note: bob would see
    the fact sink and name a memory he cannot read. In the workspace scope she may."""
    fact = await write(client, keys["bob"], {"text": "The office is in Leeds."})
    refused = await write(
        client, keys["alice"],
        {"text": SECRET_TEXT, "scope": "room:ops", "supersedes": fact["id"]}, status=400,
    )  # fmt: skip
    assert refused["error"]["param"] == "supersedes"
    seen = await client.get(f"/api/v1/memories/{fact['id']}", headers=auth(keys["bob"]))
    assert (await seen.json())["supersededBy"] is None
    public = await write(
        client, keys["alice"], {"text": "The office moved to York.", "supersedes": fact["id"]}
    )
    seen = await client.get(f"/api/v1/memories/{fact['id']}", headers=auth(keys["bob"]))
    assert (await seen.json())["supersededBy"] == public["id"]
    replacement = await client.get(f"/api/v1/memories/{public['id']}", headers=auth(keys["bob"]))
    assert replacement.status == 200


# --- counts -------------------------------------------------------------------------------------


async def test_refusing_to_delete_a_store_counts_nothing(client: Client) -> None:
    await make_member(client, "dana")
    dana = await make_key(client, kind="personal", member="dana", scopes=["admin", "memory:write"])
    resp = await client.post("/api/v1/forward/memory_stores", json={"name": "s1"}, headers=ADMIN)
    store = (await resp.json())["id"]
    for i in range(3):
        body = {"text": f"private {i}", "store": store, "scope": "pair:erin:frank"}
        assert (await client.post("/api/v1/memories", json=body, headers=ADMIN)).status == 201
    resp = await client.delete(f"/api/v1/forward/memory_stores/{store}", headers=auth(dana))
    assert resp.status == 409
    message = (await resp.json())["error"]["message"]
    assert message == (
        "Memory store 's1' still holds active memories; delete them first or pass force=true"
    )


# --- a key that may write but not read (SPEC §9 "Writing is not reading") -------------------

WRITE_ONLY_SECRET = "Carol's diagnosis is confidential: stage two, told to nobody."
SECRET_FIELD = "ledger-7731-private"
CRM_REF = {"provider": "crm", "providerRef": "contact-1"}  # guessable, as CRM ids are


def shows_nothing_stored(answer: str) -> None:
    for secret in (WRITE_ONLY_SECRET, SECRET_FIELD, "proofCount", "diagnosis-notes"):
        assert secret not in answer, answer


@pytest.fixture
async def stored_secrets(client: Client) -> dict[str, Any]:
    """A plain memory with a guessable CRM providerRef and a path memory, both written by
    the admin with text and fields a write-only key must never be shown."""
    plain = await write(
        client,
        BOOTSTRAP_KEY,
        {"text": WRITE_ONLY_SECRET, "provider": "crm", "providerRef": "contact-1",
         "metadata": {"ledger": SECRET_FIELD}, "category": SECRET_FIELD},
    )  # fmt: skip
    resp = await client.post(
        "/api/v1/forward/memory_stores/default/memories",
        json={"path": "people/diagnosis-notes.md", "content": WRITE_ONLY_SECRET,
              "metadata": {"ledger": SECRET_FIELD}},
        headers=ADMIN,
    )  # fmt: skip
    assert resp.status == 201, await resp.text()
    return {"plain": plain, "file": await resp.json()}


async def test_a_write_only_key_is_shown_nothing_stored_by_any_write_route(
    client: Client, stored_secrets: dict[str, Any]
) -> None:
    writer = auth(await make_key(client, kind="service", scopes=["memory:write"]))
    plain, file = stored_secrets["plain"]["id"], stored_secrets["file"]["id"]
    face = "/api/v1/forward/memory_stores/default/memories"
    assert (await client.get(f"/api/v1/memories/{plain}", headers=writer)).status == 403
    attempts = [
        ("PATCH", f"/api/v1/memories/{plain}", {}),
        ("PATCH", f"/api/v1/memories/{plain}", {"importance": 0.9}),
        ("POST", "/api/v1/memories", CRM_REF),
        ("POST", "/api/v1/memories", {"memories": [CRM_REF]}),
        ("POST", f"{face}/{file}", {}),
        ("POST", f"{face}/{file}", {"content": "guess", "content_sha256": "0" * 64}),
        ("DELETE", f"{face}/{file}", None),
        ("DELETE", f"/api/v1/memories/{plain}", None),
    ]  # fmt: skip
    for method, path, body in attempts:
        resp = await client.request(method, path, json=body, headers=writer)
        answer = await resp.text()
        assert resp.status < 500, answer
        shows_nothing_stored(answer)
        assert stored_secrets["file"]["content_sha256"] not in answer
    # What it may see: which memory, and what it is now.
    resp = await client.patch(f"/api/v1/memories/{plain}", json={"importance": 0.2}, headers=writer)
    assert await resp.json() == {"id": plain, "status": "deleted", "importance": 0.2}
    # The same key is shown all of a memory it made from nothing: it sent every field.
    resp = await client.post(
        "/api/v1/memories", json={"text": "A note of its own."}, headers=writer
    )
    assert resp.status == 201 and (await resp.json())["text"] == "A note of its own."


async def test_a_write_only_duplicate_is_shown_only_what_it_sent(
    client: Client, stored_secrets: dict[str, Any]
) -> None:
    writer = auth(await make_key(client, kind="service", scopes=["memory:write"]))
    resp = await client.post(
        "/api/v1/memories",
        json={"text": WRITE_ONLY_SECRET, "importance": 0.1},
        headers=writer,
    )
    assert resp.status == 200, await resp.text()
    answer = await resp.json()
    assert answer["deduplicated"] and answer["id"] == stored_secrets["plain"]["id"]
    assert SECRET_FIELD not in json.dumps(answer) and "proofCount" not in answer
    assert "importance" not in answer  # not applied to the duplicate: not what it is now


async def test_a_write_only_key_over_mcp_is_shown_nothing_stored(
    client: Client, stored_secrets: dict[str, Any]
) -> None:
    # Over stdio (``mneme-mcp``, which calls the REST API); ``/mcp`` itself needs
    # ``memory:read`` at its door.
    key = await make_key(client, kind="service", scopes=["memory:write"])
    async with connected(client, key, "stdio") as agent:
        # A duplicate of the stored memory: the text is its own; nothing else stored is.
        result = await agent.call_tool("remember", {"text": WRITE_ONLY_SECRET})
        assert not result.is_error, result.content
        shown = json.dumps(result.structured_content)
        assert stored_secrets["plain"]["id"] in shown and SECRET_FIELD not in shown
        assert result.structured_content["scope"] is None  # stored, not sent: not shown
        for tool, args in (
            ("forget", {"memory_id": stored_secrets["plain"]["id"]}),
            ("write_file", {"store": "default", "path": "people/diagnosis-notes.md",
                            "content": "guess"}),
        ):  # fmt: skip
            result = await agent.call_tool(tool, args)
            shows_nothing_stored(json.dumps([c.model_dump() for c in result.content]))
