"""Keys, scopes, workspaces and the readability predicate."""

from __future__ import annotations

import asyncpg
import pytest

from service.queries import keys, tenancy
from tests.helpers import ADMIN, Client, auth, make_key, make_member


async def test_both_header_forms_are_accepted(client: Client) -> None:
    bearer = await client.get(
        "/api/v1/members", headers={"Authorization": "Bearer " + ADMIN["Authorization"][7:]}
    )
    x_api_key = await client.get(
        "/api/v1/members", headers={"X-API-Key": ADMIN["Authorization"][7:]}
    )
    assert bearer.status == 200
    assert x_api_key.status == 200


async def test_a_revoked_key_stops_working_at_once(client: Client) -> None:
    key = await make_key(client, kind="service", scopes=["admin"])
    listed = await (await client.get("/api/v1/keys", headers=auth(key))).json()
    key_id = next(k["id"] for k in listed["data"] if k["revoked_at"] is None and k["name"] is None)
    assert (await client.delete(f"/api/v1/keys/{key_id}", headers=ADMIN)).status == 204
    assert (await client.get("/api/v1/keys", headers=auth(key))).status == 401
    after = await (await client.get("/api/v1/keys", headers=ADMIN)).json()
    assert next(k for k in after["data"] if k["id"] == key_id)["revoked_at"] is not None


async def test_secrets_are_stored_only_as_sha256(client: Client, conn: asyncpg.Connection) -> None:
    key = await make_key(client, kind="service", scopes=["memory:read"])
    rows = await conn.fetch("SELECT secret_sha256 FROM api_keys")
    stored = {bytes(r["secret_sha256"]) for r in rows}
    assert keys.digest(key) in stored
    dump = " ".join(str(r) for r in await conn.fetch("SELECT * FROM api_keys"))
    assert key not in dump


async def test_key_listing_never_shows_secrets(client: Client) -> None:
    secret = await make_key(client, kind="service", scopes=["memory:read"], name="ci")
    text = await (await client.get("/api/v1/keys", headers=ADMIN)).text()
    assert secret not in text
    assert '"key"' not in text


async def test_personal_key_needs_a_registered_member(client: Client) -> None:
    resp = await client.post(
        "/api/v1/keys",
        json={"kind": "personal", "member": "ghost", "scopes": ["memory:read"]},
        headers=ADMIN,
    )
    assert resp.status == 404
    resp = await client.post(
        "/api/v1/keys", json={"kind": "personal", "scopes": ["memory:read"]}, headers=ADMIN
    )
    assert resp.status == 400


async def test_service_key_with_a_member_is_refused(client: Client) -> None:
    await make_member(client, "alice")
    resp = await client.post(
        "/api/v1/keys",
        json={"kind": "service", "member": "alice", "scopes": ["admin"]},
        headers=ADMIN,
    )
    assert resp.status == 400
    assert (await resp.json())["error"]["param"] == "member"


async def test_unknown_scope_is_refused_with_the_valid_list(client: Client) -> None:
    resp = await client.post(
        "/api/v1/keys", json={"kind": "service", "scopes": ["memory:delete"]}, headers=ADMIN
    )
    assert resp.status == 400
    assert (await resp.json())["error"]["valid"] == ["memory:read", "memory:write", "admin"]


async def test_created_key_response_has_the_documented_fields(client: Client) -> None:
    await make_member(client, "alice")
    resp = await client.post(
        "/api/v1/keys",
        json={"kind": "personal", "member": "alice", "scopes": ["memory:read"], "name": "laptop"},
        headers=ADMIN,
    )
    assert resp.status == 201
    body = await resp.json()
    assert body["id"].startswith("key_")
    assert body["key"].startswith("mneme_sk_")
    assert (body["kind"], body["member"], body["scopes"], body["name"]) == (
        "personal",
        "alice",
        ["memory:read"],
        "laptop",
    )
    assert body["created_at"].endswith("Z")


async def test_workspaces_are_isolated(client: Client, db_url: str) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        other = await tenancy.create_workspace(conn, "other", "free")
        assert other is not None
        _, other_admin = await keys.create_key(
            conn, other.id, kind="service", member=None, scopes=list(keys.SCOPES), name=None
        )
    finally:
        await conn.close()

    await make_member(client, "alice")
    await client.post("/api/v1/rooms", json={"id": "ops", "members": ["alice"]}, headers=ADMIN)
    mine = await (await client.get("/api/v1/keys", headers=ADMIN)).json()

    theirs = auth(other_admin)
    assert (await (await client.get("/api/v1/members", headers=theirs)).json())["data"] == []
    assert (await (await client.get("/api/v1/rooms", headers=theirs)).json())["data"] == []
    their_keys = (await (await client.get("/api/v1/keys", headers=theirs)).json())["data"]
    assert {k["id"] for k in their_keys}.isdisjoint({k["id"] for k in mine["data"]})
    # Another workspace's things answer 404, exactly like things that do not exist.
    assert (await client.put("/api/v1/rooms/ops/members/bob", headers=theirs)).status == 404
    assert (
        await client.delete(f"/api/v1/keys/{mine['data'][0]['id']}", headers=theirs)
    ).status == 404
    # And a personal key there cannot be made for a member of this workspace.
    resp = await client.post(
        "/api/v1/keys",
        json={"kind": "personal", "member": "alice", "scopes": ["memory:read"]},
        headers=theirs,
    )
    assert resp.status == 404


async def test_personal_key_principal_carries_the_members_rooms(
    client: Client, conn: asyncpg.Connection
) -> None:
    await make_member(client, "alice")
    await client.post(
        "/api/v1/rooms", json={"id": "ops", "members": ["alice", "bob"]}, headers=ADMIN
    )
    await client.post("/api/v1/rooms", json={"id": "sales", "members": ["bob"]}, headers=ADMIN)
    key = await make_key(client, kind="personal", member="alice", scopes=["memory:read"])
    principal = await keys.authenticate(conn, key)
    assert principal is not None
    assert (principal.kind, principal.member, principal.rooms) == ("personal", "alice", ["ops"])
    assert not principal.is_service


@pytest.mark.parametrize(
    ("scope", "is_service", "member", "rooms", "readable"),
    [
        ("workspace", False, "alice", [], True),
        ("room:ops", False, "alice", ["ops"], True),
        ("room:ops", False, "alice", ["sales"], False),
        ("pair:alice:bot", False, "alice", [], True),
        ("pair:alice:bot", False, "bot", [], True),
        ("pair:alice:bot", False, "carol", [], False),
        ("pair:alice:bot:x", False, "alice", [], False),
        ("pair:alice", False, "alice", [], False),
        ("private:alice", False, "alice", ["ops"], False),
        ("private:alice", True, None, [], True),
        ("pair:alice:bot", True, None, [], True),
        ("room:ops", True, None, [], True),
    ],
)
async def test_readability_predicate(
    conn: asyncpg.Connection,
    scope: str,
    is_service: bool,
    member: str | None,
    rooms: list[str],
    readable: bool,
) -> None:
    got = await conn.fetchval(
        "SELECT mneme_readable($1, $2, $3, $4)", scope, is_service, member, rooms
    )
    assert got is readable


async def test_rooms_and_membership_changes(client: Client) -> None:
    resp = await client.post(
        "/api/v1/rooms", json={"id": "ops", "members": ["bob", "alice"]}, headers=ADMIN
    )
    assert resp.status == 201
    assert (await resp.json())["members"] == ["alice", "bob"]
    resp = await client.put("/api/v1/rooms/ops/members/carol", headers=ADMIN)
    assert (await resp.json())["members"] == ["alice", "bob", "carol"]
    # Adding twice is a no-op.
    resp = await client.put("/api/v1/rooms/ops/members/carol", headers=ADMIN)
    assert (await resp.json())["members"] == ["alice", "bob", "carol"]
    resp = await client.delete("/api/v1/rooms/ops/members/alice", headers=ADMIN)
    assert resp.status == 200
    assert (await resp.json())["members"] == ["bob", "carol"]
    listed = await (await client.get("/api/v1/rooms", headers=ADMIN)).json()
    assert [r["id"] for r in listed["data"]] == ["ops"]


async def test_bad_ids_are_refused(client: Client) -> None:
    for bad in ["", "-lead", "has space", "a" * 65, "semi:colon"]:
        resp = await client.post(
            "/api/v1/members", json={"id": bad, "kind": "human"}, headers=ADMIN
        )
        assert resp.status == 400, bad
        resp = await client.post("/api/v1/rooms", json={"id": bad}, headers=ADMIN)
        assert resp.status == 400, bad
    resp = await client.post("/api/v1/members", json={"id": "ok", "kind": "robot"}, headers=ADMIN)
    assert resp.status == 400
    members = await (await client.get("/api/v1/members", headers=ADMIN)).json()
    assert members["data"] == []
