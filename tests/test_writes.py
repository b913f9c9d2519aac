"""The write API: create, dedupe, upsert, supersede, batches, idempotency, patch, delete."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from service.settings import Settings
from tests.helpers import ADMIN, Client, auth, make_key, make_member

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64

# The default store's version, as the service reads it (0 before its first stamp).
DEFAULT_VERSION = """
SELECT coalesce((SELECT v.version FROM store_versions v JOIN stores s ON s.id = v.store_id
                 WHERE s.name = 'default'), 0)
"""


def image(data: bytes, mime_type: str = "image/png") -> dict[str, str]:
    return {"data": base64.b64encode(data).decode(), "mimeType": mime_type}


async def post(client: Client, body: Any, headers: dict[str, str] = ADMIN) -> tuple[int, Any]:
    resp = await client.post("/api/v1/memories", json=body, headers=headers)
    return resp.status, await resp.json()


async def count(conn: asyncpg.Connection, table: str = "memories") -> int:
    value: int = await conn.fetchval(f"SELECT count(*) FROM {table}")
    return value


async def test_create_returns_the_full_object(client: Client) -> None:
    status, m = await post(
        client,
        {
            "text": "Cohort runs on Convex.",
            "factType": "world",
            "entityRefs": ["entity:cohort"],
            "importance": 0.8,
            "category": "infra",
            "eventDate": "2026-07-14T15:05:00+02:00",
            "metadata": {"source": "chat"},
        },
    )
    assert status == 201
    assert m["id"].startswith("mem_")
    assert set(m) == {
        "id", "text", "scope", "tier", "factType", "status", "provider", "providerRef",
        "entityRefs", "proofCount", "firstSeenAt", "lastUsedAt", "store", "speaker",
        "eventDate", "importance", "category", "supersededBy", "path", "metadata",
        "contentSha256", "embeddingStatus", "deduplicated", "upserted",
    }  # fmt: skip
    assert (m["scope"], m["tier"], m["status"], m["provider"]) == (
        "workspace", "hindsight", "active", "mneme",
    )  # fmt: skip
    assert m["providerRef"] == m["id"]
    assert m["proofCount"] is None
    assert m["store"].startswith("memstore_")
    assert m["eventDate"] == "2026-07-14T13:05:00.000Z"
    assert m["firstSeenAt"] == m["lastUsedAt"] and m["firstSeenAt"].endswith("Z")
    assert m["contentSha256"] == hashlib.sha256(b"Cohort runs on Convex.").hexdigest()
    assert (m["embeddingStatus"], m["deduplicated"], m["upserted"]) == ("pending", False, False)

    got = await (await client.get(f"/api/v1/memories/{m['id']}", headers=ADMIN)).json()
    assert got == {k: v for k, v in m.items() if k not in ("deduplicated", "upserted")}


async def test_a_write_is_committed_before_it_is_acknowledged(
    client: Client, conn: asyncpg.Connection
) -> None:
    _, m = await post(client, {"text": "durable"})
    assert await conn.fetchval("SELECT text FROM memories WHERE id = $1", m["id"]) == "durable"


async def test_exact_duplicate_bumps_proof_count_instead_of_adding_a_row(
    client: Client, conn: asyncpg.Connection
) -> None:
    status, first = await post(client, {"text": "Dave prefers squash merges."})
    assert status == 201
    status, second = await post(client, {"text": "Dave prefers squash merges."})
    assert status == 200
    assert second["id"] == first["id"]
    assert (second["deduplicated"], second["proofCount"]) == (True, 2)
    _, third = await post(client, {"text": "Dave prefers squash merges."})
    assert third["proofCount"] == 3
    assert await count(conn) == 1
    # Only a change of text, path, metadata or status is a version.
    assert await count(conn, "memory_versions") == 1


@pytest.mark.parametrize(
    "variant",
    [
        {"text": "Dave prefers squash merges!"},
        {"text": "Dave prefers squash merges.", "scope": "room:eng"},
        {"text": "Dave prefers squash merges.", "speaker": "me"},
        {"text": "Dave prefers squash merges.", "path": "notes/dave.md"},
        {"text": "Dave prefers squash merges.", "providerRef": "x-1"},
        {"text": "Dave prefers squash merges.", "image": image(PNG)},  # a caption
    ],
)
async def test_near_duplicates_are_new_rows(client: Client, variant: dict[str, Any]) -> None:
    _, first = await post(client, {"text": "Dave prefers squash merges."})
    status, other = await post(client, variant)
    assert status == 201
    assert other["id"] != first["id"] and other["deduplicated"] is False


async def test_an_image_duplicates_only_the_same_picture(
    client: Client, conn: asyncpg.Connection
) -> None:
    # Same caption, other bytes: a second picture, never folded into the first (it was,
    # and its bytes were lost), on every write path: one memory, a batch, item by item.
    other = PNG + b"\x01"
    _, text = await post(client, {"text": "Whiteboard"})
    status, first = await post(client, {"text": "Whiteboard", "image": image(PNG)})
    assert status == 201 and first["id"] != text["id"]
    status, second = await post(client, {"text": "Whiteboard", "image": image(other)})
    assert status == 201 and second["id"] != first["id"]
    status, again = await post(client, {"text": "Whiteboard", "image": image(PNG)})
    assert (status, again["id"], again["proofCount"]) == (200, first["id"], 2)

    third = PNG + b"\x02"
    status, batch = await post(
        client, {"memories": [{"text": "Whiteboard", "image": image(third)}]}
    )
    [made] = batch["memories"]
    assert status == 200 and made["deduplicated"] is False
    status, batch = await post(client, {"memories": [  # one identity twice: item by item
        {"text": "Diagram", "image": image(PNG)}, {"text": "Diagram", "image": image(other)},
        {"text": "Diagram", "image": image(PNG)},
    ]})  # fmt: skip
    a, b, c = batch["memories"]
    assert status == 200 and len({a["id"], b["id"]}) == 2 and c["id"] == a["id"]
    assert c["deduplicated"] is True
    stored = await conn.fetch("SELECT id, media FROM memories WHERE kind = 'image' ORDER BY id")
    assert [bytes(r["media"]) for r in stored] == [PNG, other, third, PNG, other]
    for r in stored:
        resp = await client.get(f"/api/v1/memories/{r['id']}/media", headers=ADMIN)
        assert await resp.read() == bytes(r["media"])


async def test_duplicates_of_archived_memories_are_new_rows(client: Client) -> None:
    _, first = await post(client, {"text": "old news"})
    await client.patch(
        f"/api/v1/memories/{first['id']}", json={"status": "archived"}, headers=ADMIN
    )
    status, again = await post(client, {"text": "old news"})
    assert status == 201 and again["id"] != first["id"]


async def test_provider_ref_upserts_and_keeps_omitted_fields(
    client: Client, conn: asyncpg.Connection
) -> None:
    status, first = await post(
        client,
        {"text": "v1", "provider": "hindsight", "providerRef": "mem-8891", "importance": 0.9,
         "factType": "world", "entityRefs": ["entity:a"]},
    )  # fmt: skip
    assert status == 201 and first["providerRef"] == "mem-8891"
    status, second = await post(
        client, {"text": "v2", "provider": "hindsight", "providerRef": "mem-8891"}
    )
    assert status == 200
    assert second["id"] == first["id"]
    assert (second["upserted"], second["text"]) == (True, "v2")
    assert (second["importance"], second["factType"], second["entityRefs"]) == (
        0.9, "world", ["entity:a"],
    )  # fmt: skip
    assert await count(conn) == 1
    ops = await conn.fetch("SELECT operation FROM memory_versions ORDER BY id")
    assert [r["operation"] for r in ops] == ["created", "modified"]
    # The same ref from another provider is another memory.
    status, _ = await post(
        client, {"text": "v2", "provider": "hermes-core", "providerRef": "mem-8891"}
    )
    assert status == 201


async def test_upsert_with_nothing_new_writes_no_version(
    client: Client, conn: asyncpg.Connection
) -> None:
    body = {"text": "same", "providerRef": "r1"}
    await post(client, body)
    status, again = await post(client, body)
    assert status == 200 and again["upserted"] is True
    assert await count(conn, "memory_versions") == 1


async def test_an_upsert_never_moves_a_path(client: Client, conn: asyncpg.Connection) -> None:
    """A path is fixed when the memory is written, through every door: the Memory Store
    face refuses another path, and so does an upsert onto a file's identity."""
    resp = await client.post(
        "/api/v1/forward/memory_stores/default/memories",
        json={"path": "notes/a.md", "content": "x"}, headers=ADMIN,
    )  # fmt: skip
    assert resp.status == 201, await resp.text()
    file_id = (await resp.json())["id"]
    await post(client, {"text": "no path", "providerRef": "fact-1"})
    before = await conn.fetch("SELECT id, path, text FROM memories ORDER BY id")
    for body in (
        {"text": "y", "providerRef": file_id, "path": "moved.md"},
        {"text": "no path", "providerRef": "fact-1", "path": "now/a/file.md"},
        {"memories": [{"text": "ok", "providerRef": "fact-2"},
                      {"providerRef": file_id, "path": "moved.md"}]},
    ):  # fmt: skip
        status, error = await post(client, body)
        assert status == 400 and error["error"]["param"] == "path", error
        assert "immutable" in error["error"]["message"]
    assert await conn.fetch("SELECT id, path, text FROM memories ORDER BY id") == before
    status, same = await post(client, {"text": "z", "providerRef": file_id, "path": "notes/a.md"})
    assert (status, same["path"], same["text"]) == (200, "notes/a.md", "z")


async def test_sync_may_supply_first_seen_and_last_used(client: Client) -> None:
    _, m = await post(client, {"text": "synced", "firstSeenAt": "2025-01-10T12:00:00Z"})
    assert m["firstSeenAt"] == "2025-01-10T12:00:00.000Z"
    assert m["lastUsedAt"] == "2025-01-10T12:00:00.000Z"
    _, m = await post(
        client,
        {
            "text": "synced 2",
            "firstSeenAt": "2025-01-10T12:00:00Z",
            "lastUsedAt": "2025-01-16T09:30:00.000Z",
        },
    )
    assert m["lastUsedAt"] == "2025-01-16T09:30:00.000Z"


async def test_a_sync_sent_again_keeps_when_the_memory_was_last_used(
    client: Client, conn: asyncpg.Connection
) -> None:
    """lastUsedAt starts at firstSeenAt; sending the memory again with its firstSeenAt
    changes nothing, and does not reset the use a search recorded."""
    body = {"text": "synced", "providerRef": "s-1", "firstSeenAt": "2025-01-10T12:00:00Z"}
    _, m = await post(client, body)
    assert m["lastUsedAt"] == "2025-01-10T12:00:00.000Z"
    await conn.execute(
        "INSERT INTO memory_uses SELECT workspace_id, id, '2026-02-01T00:00:00Z' "
        "FROM memories WHERE id = $1",
        m["id"],
    )
    status, again = await post(client, body)
    assert status == 200 and again["upserted"] is True
    assert again["lastUsedAt"] == "2026-02-01T00:00:00.000Z"
    assert await count(conn, "memory_versions") == 1


async def test_supersedes_marks_the_older_memory(client: Client) -> None:
    _, old = await post(client, {"text": "The office is in Leeds."})
    status, new = await post(client, {"text": "The office moved to York.", "supersedes": old["id"]})
    assert status == 201
    got = await (await client.get(f"/api/v1/memories/{old['id']}", headers=ADMIN)).json()
    assert got["supersededBy"] == new["id"]
    assert new["supersededBy"] is None


async def test_a_gone_superseder_makes_its_predecessor_current_again(client: Client) -> None:
    """Deleted (DELETE or a PATCH of status) or purged, the memory that superseded another
    no longer demotes it; one superseded by a memory still live stays superseded."""

    async def superseded_by(memory: dict[str, Any]) -> str | None:
        got = await (await client.get(f"/api/v1/memories/{memory['id']}", headers=ADMIN)).json()
        by: str | None = got["supersededBy"]
        return by

    async def replaced(text: str) -> tuple[dict[str, Any], dict[str, Any]]:
        _, old = await post(client, {"text": f"{text} (old)"})
        _, new = await post(client, {"text": f"{text} (new)", "supersedes": old["id"]})
        assert await superseded_by(old) == new["id"]
        return old, new

    old, new = await replaced("The office is in Leeds.")
    assert (await client.delete(f"/api/v1/memories/{new['id']}", headers=ADMIN)).status == 200
    assert await superseded_by(old) is None

    old, new = await replaced("Standup is at 9.")
    patched = await client.patch(
        f"/api/v1/memories/{new['id']}", json={"status": "deleted"}, headers=ADMIN
    )
    assert patched.status == 200, await patched.text()
    assert await superseded_by(old) is None

    old, new = await replaced("Deploys are on Fridays.")
    purged = await client.delete(f"/api/v1/memories/{new['id']}?purge=true", headers=ADMIN)
    assert purged.status == 200
    assert await superseded_by(old) is None

    # Superseded again since: the first replacement going changes nothing.
    old, first = await replaced("The cache is Redis.")
    _, second = await post(client, {"text": "The cache is Valkey.", "supersedes": old["id"]})
    assert (await client.delete(f"/api/v1/memories/{first['id']}", headers=ADMIN)).status == 200
    assert await superseded_by(old) == second["id"]


async def test_a_replacement_is_readable_by_every_reader_of_what_it_replaces(
    client: Client, conn: asyncpg.Connection
) -> None:
    """A superseded memory sinks and names its replacement, so the replacement must be in
    its scope or in 'workspace': a room's note cannot demote a workspace fact for members
    outside the room (nor hand them the room note's id)."""
    _, shared = await post(client, {"text": "The office is in Leeds."})
    before = await count(conn)
    status, error = await post(
        client, {"text": "It moved to York.", "scope": "room:ops", "supersedes": shared["id"]}
    )
    assert status == 400 and error["error"]["param"] == "supersedes", error
    assert await count(conn) == before
    got = await (await client.get(f"/api/v1/memories/{shared['id']}", headers=ADMIN)).json()
    assert got["supersededBy"] is None
    # The same scope, or 'workspace' over a room: every reader of the old reads the new.
    _, room_note = await post(client, {"text": "Ops meets at 9.", "scope": "room:ops"})
    status, same = await post(
        client, {"text": "Ops meets at 10.", "scope": "room:ops", "supersedes": room_note["id"]}
    )
    assert status == 201
    status, _ = await post(client, {"text": "Ops meets at 11.", "supersedes": same["id"]})
    assert status == 201


async def test_a_scope_patch_keeps_replacements_readable(client: Client) -> None:
    _, old = await post(client, {"text": "The office is in Leeds."})
    _, new = await post(client, {"text": "The office is in York.", "supersedes": old["id"]})

    async def rescope(memory: dict[str, Any], scope: str) -> tuple[int, Any]:
        resp = await client.patch(
            f"/api/v1/memories/{memory['id']}", json={"scope": scope}, headers=ADMIN
        )
        return resp.status, await resp.json()

    # The replacement may not narrow below what it replaced ...
    status, error = await rescope(new, "room:ops")
    assert status == 400 and error["error"]["param"] == "scope", error
    # ... the replaced may narrow under a workspace replacement, and then both may match.
    assert (await rescope(old, "room:ops"))[0] == 200
    assert (await rescope(new, "room:ops"))[0] == 200
    status, error = await rescope(old, "pair:alice:bot")  # room:ops does not cover it
    assert status == 400 and error["error"]["param"] == "scope", error
    assert "ops" not in error["error"]["message"]


async def test_batch_answers_in_request_order(client: Client) -> None:
    resp = await client.post(
        "/api/v1/memories",
        json={"memories": [{"text": "a"}, {"text": "b"}, {"text": "a"}]},
        headers=ADMIN,
    )
    assert resp.status == 200
    out = (await resp.json())["memories"]
    assert [m["text"] for m in out] == ["a", "b", "a"]
    assert out[2]["id"] == out[0]["id"] and out[2]["deduplicated"] is True


@pytest.mark.parametrize(
    ("items", "status", "index"),
    [
        ([{"text": "ok"}, {"text": "ok 2"}, {"text": 5}], 400, 2),
        ([{"text": "ok"}, {"text": "x", "store": "nope"}, {"text": "\x00"}], 404, 1),
        ([{"text": "ok"}, {"text": "x", "speaker": "Nobody"}], 404, 1),
        ([{"text": "ok"}, {"text": "x", "supersedes": "mem_0000000000aaaaaaaaaa"}], 404, 1),
        ([{"text": "ok"}, {"text": "x", "tier": "gold"}], 400, 1),
        # An item that does not decode (a wrong type, an unknown field) is refused only if
        # every item before it passes: the first failing item decides.
        ([{"text": "a", "store": "nope"}, {"text": 5}], 404, 0),
        ([{"text": "a", "speaker": "Nobody"}, {"text": "b", "bogusField": 1}], 404, 0),
        ([{"text": "ok"}, {"text": "ok"}, {"text": "b", "bogusField": 1}], 400, 2),
        ([{"text": "ok", "path": "notes/a"}, {"text": 5}], 400, 1),
    ],
)
async def test_batch_is_all_or_nothing_and_names_the_failing_item(
    client: Client, conn: asyncpg.Connection, items: list[dict[str, Any]], status: int, index: int
) -> None:
    resp = await client.post("/api/v1/memories", json={"memories": items}, headers=ADMIN)
    assert resp.status == status
    assert f"memories[{index}]" in (await resp.json())["error"]["message"]
    assert await count(conn) == 0
    assert await count(conn, "memory_versions") == 0


@pytest.mark.parametrize("size", [0, 501])
async def test_batch_size_is_1_to_500(client: Client, size: int) -> None:
    status, body = await post(client, {"memories": [{"text": f"m{i}"} for i in range(size)]})
    assert status == 400 and "1 to 500" in body["error"]["message"]


async def test_a_batch_of_500_is_accepted(client: Client, conn: asyncpg.Connection) -> None:
    status, body = await post(client, {"memories": [{"text": f"m{i}"} for i in range(500)]})
    assert status == 200 and len(body["memories"]) == 500
    assert await count(conn) == 500


BAD_INPUTS: list[tuple[Any, int, str]] = [
    ({"text": "nul \x00 inside"}, 400, "NUL"),
    ({"text": "x" * 102_401}, 400, "102400"),
    ({"text": "é" * 51_201}, 400, "102400"),  # 102,402 bytes of UTF-8
    ({"text": ""}, 400, "empty"),
    ({}, 400, "text is required"),
    ({"text": 42}, 400, "$.text"),
    ({"text": "x", "importance": "high"}, 400, "$.importance"),
    ({"text": "x", "importance": 1.5}, 400, "importance"),
    ({"text": "x", "tier": "gold"}, 400, "core, hindsight"),
    ({"text": "x", "status": "gone"}, 400, "active, archived, deleted"),
    ({"text": "x", "scope": "team:eng"}, 400, "scope"),
    ({"text": "x", "scope": "pair:alice"}, 400, "scope"),
    ({"text": "x", "scope": "room:has space"}, 400, "scope"),
    ({"text": "x", "eventDate": "yesterday"}, 400, "eventDate"),
    ({"text": "x", "metadata": {f"k{i}": "v" for i in range(17)}}, 400, "16"),
    ({"text": "x", "metadata": {"k": 1}}, 400, "metadata"),
    ({"text": "x", "metadata": {"k": "x" * 65_529}}, 400, "65536"),  # 65,537 bytes of JSON
    ({"text": "x", "proofCount": -1}, 400, "proofCount"),
    ({"text": "x", "colour": "red"}, 400, "colour"),
    ({"text": "x", "path": "/abs"}, 400, "path"),
    ({"text": "x", "path": "a//b"}, 400, "path"),
    ({"text": "x", "path": "../x"}, 400, "path"),
    ({"text": "x", "image": {"data": "not base64!", "mimeType": "image/png"}}, 400, "base64"),
    ({"text": "x", "image": image(b"GIF89a..")}, 400, "image/png"),
    ({"text": "x", "image": image(PNG, "image/bmp")}, 400, "mimeType"),
    ({"text": "x", "image": image(PNG + b"\x00" * (5 * 1024 * 1024))}, 400, "5 MiB"),
    ({"text": "x", "store": "nope"}, 404, "nope"),
    ({"text": "x", "speaker": "Caroline"}, 404, "Caroline"),
    ({"text": "x", "supersedes": "mem_unknown"}, 404, "mem_unknown"),
    (["not", "an", "object"], 400, "JSON object"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "status", "needle"), BAD_INPUTS)
async def test_bad_input_is_refused_and_writes_nothing(
    client: Client, conn: asyncpg.Connection, body: Any, status: int, needle: str
) -> None:
    got, answer = await post(client, body)
    assert got == status, answer
    assert answer["error"]["type"] == (
        "invalid_request_error" if status == 400 else "not_found_error"
    )
    assert needle in answer["error"]["message"]
    assert await count(conn) == 0


async def test_largest_text_is_accepted(client: Client) -> None:
    status, m = await post(client, {"text": "x" * 102_400})
    assert status == 201
    assert m["contentSha256"] == hashlib.sha256(b"x" * 102_400).hexdigest()


async def test_writes_need_the_write_scope(client: Client) -> None:
    reader = await make_key(client, kind="service", scopes=["memory:read"])
    status, body = await post(client, {"text": "x"}, auth(reader))
    assert status == 403 and body["error"]["type"] == "permission_error"


async def test_personal_keys_write_only_into_scopes_they_can_read(client: Client) -> None:
    await make_member(client, "alice")
    await client.post("/api/v1/rooms", json={"id": "eng", "members": ["alice"]}, headers=ADMIN)
    key = auth(
        await make_key(
            client, kind="personal", member="alice", scopes=["memory:write", "memory:read"]
        )
    )
    for scope in ("workspace", "room:eng", "pair:alice:bot", "pair:bob:alice"):
        status, _ = await post(client, {"text": f"in {scope}", "scope": scope}, key)
        assert status == 201, scope
    for scope in ("room:sales", "pair:bob:bot"):
        status, body = await post(client, {"text": f"in {scope}", "scope": scope}, key)
        assert status == 403, scope
        assert scope in body["error"]["message"]


async def test_other_members_and_workspaces_cannot_see_a_memory(client: Client) -> None:
    await make_member(client, "alice")
    await make_member(client, "bob")
    alice = auth(
        await make_key(
            client, kind="personal", member="alice", scopes=["memory:read", "memory:write"]
        )
    )
    bob = auth(
        await make_key(
            client, kind="personal", member="bob", scopes=["memory:read", "memory:write"]
        )
    )
    _, m = await post(
        client, {"text": "between alice and the bot", "scope": "pair:alice:bot"}, alice
    )
    assert (await client.get(f"/api/v1/memories/{m['id']}", headers=alice)).status == 200
    for method in ("GET", "PATCH", "DELETE"):
        resp = await client.request(method, f"/api/v1/memories/{m['id']}", json={}, headers=bob)
        assert resp.status == 404, method
    assert (await client.get(f"/api/v1/memories/{m['id']}/versions", headers=bob)).status == 404
    # supersedes cannot point at what the caller cannot read either
    status, _ = await post(client, {"text": "bob's view", "supersedes": m["id"]}, bob)
    assert status == 404


async def test_idempotent_retry_returns_the_first_response_and_writes_nothing(
    client: Client, conn: asyncpg.Connection
) -> None:
    headers = {**ADMIN, "Idempotency-Key": "retry-1"}
    first = await client.post("/api/v1/memories", json={"text": "once"}, headers=headers)
    assert first.status == 201
    again = await client.post("/api/v1/memories", json={"text": "once"}, headers=headers)
    assert again.status == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert await again.json() == await first.json()
    assert await count(conn) == 1
    assert await conn.fetchval("SELECT proof_count FROM memories") is None  # not deduplicated
    other = await client.post("/api/v1/memories", json={"text": "twice"}, headers=headers)
    assert other.status == 409
    assert await count(conn) == 1


async def test_concurrent_retries_with_one_key_write_once(
    client: Client, conn: asyncpg.Connection
) -> None:
    headers = {**ADMIN, "Idempotency-Key": "race"}
    body = {"memories": [{"text": f"item {i}", "providerRef": None} for i in range(20)]}
    responses = await asyncio.gather(
        *(client.post("/api/v1/memories", json=body, headers=headers) for _ in range(4))
    )
    assert {r.status for r in responses} == {200}
    bodies = [await r.json() for r in responses]
    assert all(b == bodies[0] for b in bodies)
    assert await count(conn) == 20


async def test_patch_changes_fields_and_records_a_version(
    client: Client, conn: asyncpg.Connection
) -> None:
    _, m = await post(client, {"text": "draft", "metadata": {"a": "1"}})
    await conn.execute("UPDATE memories SET embedding_status = 'ready'")
    resp = await client.patch(
        f"/api/v1/memories/{m['id']}",
        json={"text": "final", "tier": "core", "importance": 0.2, "metadata": {"a": "2"}},
        headers=ADMIN,
    )
    assert resp.status == 200
    got = await resp.json()
    assert (got["text"], got["tier"], got["importance"], got["metadata"]) == (
        "final",
        "core",
        0.2,
        {"a": "2"},
    )
    assert got["embeddingStatus"] == "pending"  # a text change re-embeds
    assert got["contentSha256"] == hashlib.sha256(b"final").hexdigest()
    versions = (
        await (await client.get(f"/api/v1/memories/{m['id']}/versions", headers=ADMIN)).json()
    )["data"]
    assert [v["operation"] for v in versions] == ["modified", "created"]
    # Same values again: no change, no version.
    await client.patch(f"/api/v1/memories/{m['id']}", json={"text": "final"}, headers=ADMIN)
    assert await count(conn, "memory_versions") == 2
    # Fields outside the audit trail change without a version.
    await client.patch(f"/api/v1/memories/{m['id']}", json={"importance": 0.3}, headers=ADMIN)
    assert await count(conn, "memory_versions") == 2


async def test_patch_refuses_bad_values_and_leaves_the_memory_alone(client: Client) -> None:
    _, m = await post(client, {"text": "keep me"})
    for body in (
        {"text": ""},
        {"status": "gone"},
        {"scope": "nope"},
        {"path": "a/b"},
        {"importance": 2},
    ):
        resp = await client.patch(f"/api/v1/memories/{m['id']}", json=body, headers=ADMIN)
        assert resp.status == 400, body
    got = await (await client.get(f"/api/v1/memories/{m['id']}", headers=ADMIN)).json()
    assert got == {k: v for k, v in m.items() if k not in ("deduplicated", "upserted")}


# {"k":"…"}: eight bytes of JSON around the value.
AT_THE_CAP = {"k": "x" * (65_536 - 8)}
OVER_THE_CAP = {"k": "x" * (65_536 - 7)}


async def test_metadata_is_capped_at_64_kib_of_json_on_every_write(
    client: Client, conn: asyncpg.Connection
) -> None:
    status, m = await post(client, {"text": "at the cap", "metadata": AT_THE_CAP})
    assert status == 201 and m["metadata"] == AT_THE_CAP
    batch = {"memories": [{"text": "fine"}, {"text": "too much", "metadata": OVER_THE_CAP}]}
    status, answer = await post(client, batch)
    assert status == 400, answer
    message = answer["error"]["message"]
    assert "memories[1]" in message and "65536 bytes (64 KiB)" in message
    url = f"/api/v1/memories/{m['id']}"
    resp = await client.patch(url, json={"metadata": OVER_THE_CAP}, headers=ADMIN)
    assert resp.status == 400
    assert (await resp.json())["error"]["type"] == "invalid_request_error"
    assert await count(conn) == 1 and await count(conn, "memory_versions") == 1
    assert (await (await client.get(url, headers=ADMIN)).json())["metadata"] == AT_THE_CAP


async def test_versions_come_in_pages_newest_first(
    client: Client, conn: asyncpg.Connection
) -> None:
    _, m = await post(client, {"text": "tagged often"})
    url = f"/api/v1/memories/{m['id']}/versions"
    for i in range(120):
        patch = {"metadata": {"n": str(i)}}
        resp = await client.patch(f"/api/v1/memories/{m['id']}", json=patch, headers=ADMIN)
        assert resp.status == 200
    rows = await conn.fetch("SELECT id FROM memory_versions ORDER BY id DESC")
    first = await (await client.get(url, headers=ADMIN)).json()
    assert len(first["data"]) == 50 and first["has_more"] is True
    seen, cursor = [v["id"] for v in first["data"]], first["next_cursor"]
    pages = [len(seen)]
    while cursor is not None:
        page = await (await client.get(f"{url}?include=text&cursor={cursor}", headers=ADMIN)).json()
        assert all(v["text"] == "tagged often" for v in page["data"])
        seen += [v["id"] for v in page["data"]]
        pages.append(len(page["data"]))
        cursor = page["next_cursor"]
        assert (cursor is not None) == page["has_more"]
    assert pages == [50, 50, 21]
    assert seen == [r["id"] for r in rows]  # no overlap, no gap, newest first
    small = await (await client.get(f"{url}?limit=100", headers=ADMIN)).json()
    assert [v["id"] for v in small["data"]] == seen[:100]
    # A cursor that is not one of ours is ignored, as the browse face's: from the top.
    odd = await (await client.get(f"{url}?cursor=not-a-cursor", headers=ADMIN)).json()
    assert odd["data"] == first["data"]


@pytest.mark.parametrize("limit", ["0", "101", "abc", "-1", "2.5"])
async def test_a_versions_limit_outside_1_to_100_is_refused(client: Client, limit: str) -> None:
    _, m = await post(client, {"text": "few versions"})
    resp = await client.get(f"/api/v1/memories/{m['id']}/versions?limit={limit}", headers=ADMIN)
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["type"] == "invalid_request_error" and "limit" in error["message"]


async def test_archive_and_restore(client: Client) -> None:
    _, m = await post(client, {"text": "weeded"})
    url = f"/api/v1/memories/{m['id']}"
    assert (await (await client.patch(url, json={"status": "archived"}, headers=ADMIN)).json())[
        "status"
    ] == "archived"
    assert (await (await client.patch(url, json={"status": "active"}, headers=ADMIN)).json())[
        "status"
    ] == "active"


async def test_delete_leaves_a_tombstone_and_purge_erases(
    client: Client, conn: asyncpg.Connection
) -> None:
    _, m = await post(
        client,
        {
            "text": "forget me",
            "image": image(PNG),
        },
    )
    url = f"/api/v1/memories/{m['id']}"
    resp = await client.delete(url, headers=ADMIN)
    assert resp.status == 200 and (await resp.json())["status"] == "deleted"
    assert (await (await client.get(url, headers=ADMIN)).json())["status"] == "deleted"
    await client.delete(url, headers=ADMIN)  # twice: nothing new
    ops = [
        v["operation"]
        for v in (await (await client.get(url + "/versions", headers=ADMIN)).json())["data"]
    ]
    assert ops == ["deleted", "created"]

    writer = auth(await make_key(client, kind="service", scopes=["memory:read", "memory:write"]))
    assert (await client.delete(url + "?purge=true", headers=writer)).status == 403
    assert (await client.delete(url + "?purge=true", headers=ADMIN)).status == 200
    assert (await client.get(url, headers=ADMIN)).status == 404
    assert (await client.get(url + "/versions", headers=ADMIN)).status == 404
    assert (await client.get(url + "/media", headers=ADMIN)).status == 404
    assert await count(conn) == 0 and await count(conn, "memory_versions") == 0
    assert "forget me" not in str(await conn.fetch("SELECT * FROM memory_versions"))


async def test_versions_carry_the_documented_fields(client: Client) -> None:
    _, m = await post(client, {"text": "v", "path": "notes/a.md"})
    data = (await (await client.get(f"/api/v1/memories/{m['id']}/versions", headers=ADMIN)).json())[
        "data"
    ]
    assert len(data) == 1
    v = data[0]
    assert set(v) == {"id", "operation", "actor", "content_sha256", "path", "status", "created_at"}
    assert v["id"].startswith("memver_") and v["actor"].startswith("key_")
    assert (v["operation"], v["path"], v["status"]) == ("created", "notes/a.md", "active")
    assert v["content_sha256"] == hashlib.sha256(b"v").hexdigest()


async def test_image_memories_serve_their_media(client: Client) -> None:
    status, m = await post(
        client,
        {
            "text": "a red square",
            "image": image(PNG),
        },
    )
    assert status == 201
    resp = await client.get(f"/api/v1/memories/{m['id']}/media", headers=ADMIN)
    assert resp.status == 200 and resp.content_type == "image/png"
    assert await resp.read() == PNG
    # Kept by a browser for the key that fetched it only.
    assert resp.headers["Cache-Control"] == "private, max-age=3600"
    assert {v.strip() for v in resp.headers["Vary"].split(",")} >= {"Authorization", "X-API-Key"}
    _, plain = await post(client, {"text": "no picture"})
    assert (await client.get(f"/api/v1/memories/{plain['id']}/media", headers=ADMIN)).status == 404


async def test_speakers(client: Client) -> None:
    base = "/api/v1/stores/default/speakers"
    listed = (await (await client.get(base, headers=ADMIN)).json())["data"]
    assert [s["name"] for s in listed] == ["me"]
    resp = await client.post(base, json={"name": "Caroline"}, headers=ADMIN)
    assert resp.status == 201 and (await resp.json())["name"] == "Caroline"
    assert (await client.post(base, json={"name": "Caroline"}, headers=ADMIN)).status == 409
    assert (await client.post(base, json={"name": "me"}, headers=ADMIN)).status == 409
    assert (await client.post(base, json={"name": " padded"}, headers=ADMIN)).status == 400
    assert (
        await client.post("/api/v1/stores/nope/speakers", json={"name": "X"}, headers=ADMIN)
    ).status == 404
    status, m = await post(client, {"text": "I went to a support group", "speaker": "Caroline"})
    assert status == 201 and m["speaker"] == "Caroline"
    assert (await client.delete(base + "/Caroline", headers=ADMIN)).status == 204
    assert (await client.delete(base + "/Caroline", headers=ADMIN)).status == 404
    assert (await client.delete(base + "/me", headers=ADMIN)).status == 409
    status, _ = await post(client, {"text": "again", "speaker": "Caroline"})
    assert status == 404


async def test_a_store_registers_speakers_up_to_its_limit(
    make_client: Callable[[Settings], Awaitable[Client]], settings: Settings
) -> None:
    client = await make_client(settings.with_overrides(max_speakers_per_store=3))
    base = "/api/v1/stores/default/speakers"
    for name in ("A", "B", "C"):
        assert (await client.post(base, json={"name": name}, headers=ADMIN)).status == 201
    resp = await client.post(base, json={"name": "D"}, headers=ADMIN)
    assert resp.status == 409
    error = (await resp.json())["error"]
    assert error["type"] == "conflict_error"
    assert "3 speakers" in error["message"] and "MNEME_MAX_SPEAKERS_PER_STORE" in error["message"]
    # One already registered is named as such, full or not; "me" is not counted.
    resp = await client.post(base, json={"name": "A"}, headers=ADMIN)
    assert "already registered" in (await resp.json())["error"]["message"]
    listed = (await (await client.get(base, headers=ADMIN)).json())["data"]
    assert [s["name"] for s in listed] == ["me", "A", "B", "C"]
    # Removing one makes room; the limit is each store's.
    assert (await client.delete(base + "/A", headers=ADMIN)).status == 204
    assert (await client.post(base, json={"name": "D"}, headers=ADMIN)).status == 201
    body = {"name": "other"}
    resp = await client.post("/api/v1/forward/memory_stores", json=body, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    other = f"/api/v1/stores/{(await resp.json())['id']}/speakers"
    assert (await client.post(other, json={"name": "E"}, headers=ADMIN)).status == 201


async def test_concurrent_registrations_never_pass_the_limit(
    make_client: Callable[[Settings], Awaitable[Client]],
    settings: Settings,
    conn: asyncpg.Connection,
) -> None:
    client = await make_client(settings.with_overrides(max_speakers_per_store=3, pool_max=8))
    base = "/api/v1/stores/default/speakers"
    for _ in range(3):  # rounds: the last two start full, then with room after deletes
        statuses = await asyncio.gather(
            *(client.post(base, json={"name": f"S{n}"}, headers=ADMIN) for n in range(12))
        )
        assert sorted(r.status for r in statuses).count(409) >= 9
        assert await conn.fetchval("SELECT count(*) FROM speakers") == 3
        gone = await conn.fetch("SELECT name FROM speakers ORDER BY name LIMIT 2")
        for row in gone:
            assert (await client.delete(f"{base}/{row['name']}", headers=ADMIN)).status == 204


async def test_writes_bump_the_store_version_and_notify_workers(
    client: Client, conn: asyncpg.Connection
) -> None:
    heard: list[str] = []
    await conn.add_listener("mneme_embed", lambda *args: heard.append(args[2]))
    before = await conn.fetchval(DEFAULT_VERSION)
    await post(client, {"text": "wake up"})
    await asyncio.sleep(0.2)
    after = await conn.fetchval(DEFAULT_VERSION)
    assert after != before
    assert heard == ["mneme_embed"]
    # A refused write bumps nothing.
    await post(client, {"text": ""})
    assert await conn.fetchval(DEFAULT_VERSION) == after


async def test_stores_are_named_by_id_or_case_insensitive_name(client: Client) -> None:
    _, m = await post(client, {"text": "by default"})
    status, by_id = await post(client, {"text": "by id", "store": m["store"]})
    status2, by_name = await post(client, {"text": "by name", "store": "DEFAULT"})
    assert (status, status2) == (201, 201)
    assert by_id["store"] == by_name["store"] == m["store"]
