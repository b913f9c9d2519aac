"""Memory Store face (seed 003, SPEC §3.4): stores, path-addressed memories, the list."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import asyncpg
import pytest
from aiohttp import ClientResponse

from tests.helpers import ADMIN, Client, auth, free_workspace_key, make_key

BASE = "/api/v1/forward/memory_stores"
LIST_ITEM = {"id", "type", "memory_store_id", "path", "content_size_bytes", "content_sha256",
             "metadata", "created_at", "updated_at"}  # fmt: skip


async def ok(resp: ClientResponse, status: int = 200) -> Any:
    assert resp.status == status, await resp.text()
    return await resp.json()


async def plain_error(resp: ClientResponse, status: int, kind: str) -> str:
    """Seed 003's error body: exactly type and message."""
    assert resp.status == status, await resp.text()
    body = await resp.json()
    assert set(body) == {"type", "error"} and body["type"] == "error"
    assert set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == kind
    message: str = body["error"]["message"]
    return message


async def new_store(client: Client, name: str = "notes", **extra: Any) -> dict[str, Any]:
    store: dict[str, Any] = await ok(
        await client.post(BASE, json={"name": name, **extra}, headers=ADMIN), 201
    )
    return store


async def put(
    client: Client, store: str, path: str, content: str = "x", **extra: Any
) -> dict[str, Any]:
    memory: dict[str, Any] = await ok(
        await client.post(
            f"{BASE}/{store}/memories",
            json={"path": path, "content": content, **extra},
            headers=ADMIN,
        ),
        201,
    )
    return memory


async def listing(client: Client, store: str, query: str = "") -> dict[str, Any]:
    body: dict[str, Any] = await ok(
        await client.get(f"{BASE}/{store}/memories?{query}", headers=ADMIN)
    )
    return body


# --- stores -------------------------------------------------------------------------------


async def test_create_store_returns_the_store_object(client: Client) -> None:
    store = await new_store(
        client, "decisions", description="Why we chose things", metadata={"team": "core"}
    )
    assert store["id"].startswith("memstore_") and store["type"] == "memory_store"
    assert (store["name"], store["description"], store["metadata"], store["strip_temporal"]) == (
        "decisions", "Why we chose things", {"team": "core"}, False,
    )  # fmt: skip
    assert store["created_at"].endswith("Z") and store["updated_at"].endswith("Z")
    got = await ok(await client.get(f"{BASE}/{store['id']}", headers=ADMIN))
    assert got == store
    assert await ok(await client.get(f"{BASE}/DECISIONS", headers=ADMIN)) == store


async def test_store_rules(client: Client) -> None:
    await new_store(client, "notes")
    await plain_error(
        await client.post(BASE, json={"name": "NOTES"}, headers=ADMIN), 409, "conflict_error"
    )
    for bad in (
        {"name": ""},
        {"name": "-x"},
        {"name": "a b"},
        {"name": "x" * 65},
        {},
        {"name": "ok", "colour": 1},
    ):
        await plain_error(
            await client.post(BASE, json=bad, headers=ADMIN), 400, "invalid_request_error"
        )
    writer = auth(await make_key(client, kind="service", scopes=["memory:read", "memory:write"]))
    await plain_error(
        await client.post(BASE, json={"name": "mine"}, headers=writer), 403, "permission_error"
    )
    await plain_error(await client.get(f"{BASE}/nope", headers=ADMIN), 404, "not_found_error")
    await plain_error(await client.get(BASE), 401, "authentication_error")


async def test_update_store(client: Client) -> None:
    store = await new_store(client, "notes")
    updated = await ok(
        await client.post(
            f"{BASE}/{store['id']}",
            json={"description": "d", "strip_temporal": True},
            headers=ADMIN,
        )
    )
    assert (updated["name"], updated["description"], updated["strip_temporal"]) == (
        "notes",
        "d",
        True,
    )
    renamed = await ok(
        await client.post(f"{BASE}/{store['id']}", json={"name": "journal"}, headers=ADMIN)
    )
    assert renamed["name"] == "journal" and renamed["id"] == store["id"]
    await plain_error(
        await client.post(f"{BASE}/default", json={"name": "other"}, headers=ADMIN),
        409,
        "conflict_error",
    )
    await plain_error(
        await client.post(f"{BASE}/{store['id']}", json={"name": "Default"}, headers=ADMIN),
        409,
        "conflict_error",
    )


async def test_store_list_pages_by_creation(client: Client) -> None:
    made = [(await new_store(client, f"s{i}"))["id"] for i in range(5)]
    first = await ok(await client.get(f"{BASE}?limit=3", headers=ADMIN))
    assert [s["name"] for s in first["data"]] == ["default", "s0", "s1"]
    assert first["has_more"] is True and first["last_id"] == made[1]
    rest = await ok(await client.get(f"{BASE}?limit=3&after_id={first['last_id']}", headers=ADMIN))
    assert [s["id"] for s in rest["data"]] == made[2:] and rest["has_more"] is False
    back = await ok(await client.get(f"{BASE}?limit=2&before_id={made[2]}", headers=ADMIN))
    assert [s["id"] for s in back["data"]] == made[:2] and back["has_more"] is True


async def test_store_list_cursor_must_be_a_store_of_the_workspace(
    client: Client, db_url: str
) -> None:
    """Paged like the memory list (SPEC §8): an id that is not one of this workspace's
    stores is a 400, whether made up, deleted, or another workspace's."""
    gone = await new_store(client, "gone")
    await ok(await client.delete(f"{BASE}/{gone['id']}", headers=ADMIN))
    elsewhere = auth(await free_workspace_key(db_url, "elsewhere"))
    theirs = await ok(await client.post(BASE, json={"name": "theirs"}, headers=elsewhere), 201)
    for param in ("after_id", "before_id"):
        for value in ("bogus", "memstore_zzzzzzzzzzzzzzzzzzzz", gone["id"], theirs["id"]):
            resp = await client.get(f"{BASE}?{param}={value}", headers=ADMIN)
            assert param in await plain_error(resp, 400, "invalid_request_error")


async def test_delete_store(client: Client, conn: asyncpg.Connection) -> None:
    store = await new_store(client, "scratch")
    await put(client, store["id"], "a.md")
    await plain_error(
        await client.delete(f"{BASE}/{store['id']}", headers=ADMIN), 409, "conflict_error"
    )
    body = await ok(await client.delete(f"{BASE}/{store['id']}?force=true", headers=ADMIN))
    assert body == {"id": store["id"], "type": "memory_store_deleted"}
    assert (
        await conn.fetchval("SELECT count(*) FROM memories WHERE store_id = $1", store["id"]) == 0
    )
    await plain_error(
        await client.get(f"{BASE}/{store['id']}", headers=ADMIN), 404, "not_found_error"
    )
    empty = await new_store(client, "empty")
    assert (await client.delete(f"{BASE}/{empty['id']}", headers=ADMIN)).status == 200
    await plain_error(
        await client.delete(f"{BASE}/default?force=true", headers=ADMIN), 409, "conflict_error"
    )


async def test_a_delete_waits_for_a_write_in_flight_and_then_refuses(
    client: Client, db_url: str
) -> None:
    """A write holds its store's row (the foreign key) until it commits; a delete without
    force must see that write's memory, not cascade over it once it is acknowledged."""
    store = await new_store(client, "racing")
    writer = await asyncpg.connect(db_url)
    try:
        async with writer.transaction():
            await writer.execute(
                "INSERT INTO memories (workspace_id, id, store_id, text, provider_ref, "
                "content_sha256, content_size_bytes) SELECT workspace_id, "
                "'mem_0000000000racingwrite', id, 'x', 'r', 'h', 1 FROM stores WHERE id = $1",
                store["id"],
            )
            delete = asyncio.create_task(client.delete(f"{BASE}/{store['id']}", headers=ADMIN))
            await asyncio.sleep(1.0)  # the delete has reached the store's row and waits
            assert not delete.done()
        await plain_error(await delete, 409, "conflict_error")
        assert (
            await writer.fetchval("SELECT status FROM memories WHERE store_id = $1", store["id"])
            == "active"
        )
    finally:
        await writer.close()


# --- memories -----------------------------------------------------------------------------


async def test_create_and_get_a_path_memory(client: Client) -> None:
    store = await new_store(client)
    content = "Chose Postgres: one database for text, vectors and the queue. — ünïcödé"
    m = await put(
        client, store["id"], "decisions/arch-choice.md", content, metadata={"owner": "backend-team"}
    )
    assert set(m) == LIST_ITEM | {"content"}
    assert (m["type"], m["memory_store_id"], m["path"], m["content"]) == (
        "memory", store["id"], "decisions/arch-choice.md", content,
    )  # fmt: skip
    raw = content.encode("utf-8")
    assert m["content_size_bytes"] == len(raw) == len(content) + 6
    assert m["content_sha256"] == hashlib.sha256(raw).hexdigest()
    assert m["metadata"] == {"owner": "backend-team"}
    assert (
        await ok(await client.get(f"{BASE}/{store['id']}/memories/{m['id']}", headers=ADMIN)) == m
    )
    # An ordinary memory underneath: tier core, visible to the write API.
    plain = await ok(await client.get(f"/api/v1/memories/{m['id']}", headers=ADMIN))
    assert (plain["tier"], plain["path"], plain["text"]) == (
        "core",
        "decisions/arch-choice.md",
        content,
    )


async def test_an_active_path_is_unique(client: Client) -> None:
    store = await new_store(client)
    first = await put(client, store["id"], "a.md")
    url = f"{BASE}/{store['id']}/memories"
    resp = await client.post(url, json={"path": "a.md", "content": "y"}, headers=ADMIN)
    await plain_error(resp, 409, "conflict_error")
    other = await new_store(client, "other")
    await put(client, other["id"], "a.md")  # another store: fine
    await ok(await client.delete(f"{BASE}/{store['id']}/memories/{first['id']}", headers=ADMIN))
    again = await put(client, store["id"], "a.md", "new")  # a deleted path is free again
    assert again["id"] != first["id"]


@pytest.mark.parametrize(
    "path",
    ["/abs", "a//b", "../x", "a/./b", "a/..", "a/", "", "tab\there", "nul\x00", "del\x7f",
     "x" * 1025, "é" * 513, "cafe\u0301"],
)  # fmt: skip
async def test_bad_paths_are_refused_and_write_nothing(
    client: Client, conn: asyncpg.Connection, path: str
) -> None:
    store = await new_store(client)
    resp = await client.post(
        f"{BASE}/{store['id']}/memories", json={"path": path, "content": "x"}, headers=ADMIN
    )
    await plain_error(resp, 400, "invalid_request_error")
    assert await conn.fetchval("SELECT count(*) FROM memories") == 0


async def test_content_limits(client: Client, conn: asyncpg.Connection) -> None:
    store = await new_store(client)
    await put(client, store["id"], "max.md", "x" * 102_400)
    for content in ("x" * 102_401, "é" * 51_201, "", "nul\x00"):
        resp = await client.post(
            f"{BASE}/{store['id']}/memories",
            json={"path": "big.md", "content": content},
            headers=ADMIN,
        )
        await plain_error(resp, 400, "invalid_request_error")
    assert await conn.fetchval("SELECT count(*) FROM memories") == 1
    ok_path = "ok/" + "y" * 1021  # exactly 1024 bytes
    await put(client, store["id"], ok_path)


async def test_update_with_precondition(client: Client, conn: asyncpg.Connection) -> None:
    store = await new_store(client)
    m = await put(client, store["id"], "plan.md", "v1", metadata={"a": "1"})
    url = f"{BASE}/{store['id']}/memories/{m['id']}"
    v2 = await ok(
        await client.post(
            url, json={"content": "v2", "content_sha256": m["content_sha256"]}, headers=ADMIN
        )
    )
    assert v2["content"] == "v2" and v2["content_sha256"] == hashlib.sha256(b"v2").hexdigest()
    assert v2["metadata"] == {"a": "1"}  # untouched
    # Stale precondition, different content: refused, nothing changes.
    stale = await client.post(
        url, json={"content": "v3", "content_sha256": m["content_sha256"]}, headers=ADMIN
    )
    assert "content_sha256" in await plain_error(stale, 409, "conflict_error")
    # Stale precondition, but the store already holds exactly this: an idempotent retry.
    retry = await ok(
        await client.post(
            url, json={"content": "v2", "content_sha256": m["content_sha256"]}, headers=ADMIN
        )
    )
    assert retry["content"] == "v2"
    versions = await ok(await client.get(url + "/versions", headers=ADMIN))
    assert [v["operation"] for v in versions["data"]] == ["modified", "created"]
    # Metadata only; and the same path again is allowed, another path is not.
    meta = await ok(
        await client.post(url, json={"metadata": {"b": "2"}, "path": "plan.md"}, headers=ADMIN)
    )
    assert meta["metadata"] == {"b": "2"} and meta["content"] == "v2"
    await plain_error(
        await client.post(url, json={"path": "moved.md"}, headers=ADMIN),
        400,
        "invalid_request_error",
    )
    assert await conn.fetchval("SELECT path FROM memories") == "plan.md"


async def test_metadata_over_64_kib_of_json_is_refused_and_nothing_changes(
    client: Client, conn: asyncpg.Connection
) -> None:
    store = await new_store(client)
    over = {"k": "x" * (65_536 - 7)}  # {"k":"…"}: 65,537 bytes
    resp = await client.post(
        f"{BASE}/{store['id']}/memories",
        json={"path": "big.md", "content": "x", "metadata": over},
        headers=ADMIN,
    )
    assert "65536 bytes" in await plain_error(resp, 400, "invalid_request_error")
    m = await put(client, store["id"], "small.md", "x", metadata={"a": "1"})
    url = f"{BASE}/{store['id']}/memories/{m['id']}"
    resp = await client.post(url, json={"metadata": over}, headers=ADMIN)
    assert "64 KiB" in await plain_error(resp, 400, "invalid_request_error")
    assert await conn.fetchval("SELECT count(*) FROM memories") == 1
    assert (await ok(await client.get(url, headers=ADMIN)))["metadata"] == {"a": "1"}


async def test_versions_are_paged_as_the_write_apis_are(client: Client) -> None:
    store = await new_store(client)
    m = await put(client, store["id"], "log.md", "v0")
    url = f"{BASE}/{store['id']}/memories/{m['id']}"
    for i in range(1, 5):
        await ok(await client.post(url, json={"content": f"v{i}"}, headers=ADMIN))
    everything = await ok(await client.get(url + "/versions", headers=ADMIN))
    assert len(everything["data"]) == 5 and everything["has_more"] is False
    assert everything["next_cursor"] is None
    seen: list[str] = []
    query = "limit=2"
    while True:
        page = await ok(await client.get(f"{url}/versions?{query}", headers=ADMIN))
        assert len(page["data"]) <= 2
        seen += [v["id"] for v in page["data"]]
        if not page["has_more"]:
            break
        query = f"limit=2&cursor={page['next_cursor']}"
    assert seen == [v["id"] for v in everything["data"]]
    for limit in ("0", "101", "abc"):
        resp = await client.get(f"{url}/versions?limit={limit}", headers=ADMIN)
        assert "limit" in await plain_error(resp, 400, "invalid_request_error")


async def test_concurrent_updates_with_one_precondition_one_wins(client: Client) -> None:
    store = await new_store(client)
    m = await put(client, store["id"], "race.md", "base")
    url = f"{BASE}/{store['id']}/memories/{m['id']}"
    bodies = [{"content": f"writer {i}", "content_sha256": m["content_sha256"]} for i in range(4)]
    responses = await asyncio.gather(*(client.post(url, json=b, headers=ADMIN) for b in bodies))
    statuses = sorted(r.status for r in responses)
    assert statuses == [200, 409, 409, 409]
    winner = next(r for r in responses if r.status == 200)
    final = await ok(await client.get(url, headers=ADMIN))
    assert final["content"] == (await winner.json())["content"]


async def test_delete_returns_a_tombstone_object(client: Client) -> None:
    store = await new_store(client)
    m = await put(client, store["id"], "gone.md")
    url = f"{BASE}/{store['id']}/memories/{m['id']}"
    body = await ok(await client.delete(url, headers=ADMIN))
    assert body == {
        "id": m["id"],
        "type": "memory_deleted",
        "memory_store_id": store["id"],
        "path": "gone.md",
    }
    await plain_error(await client.get(url, headers=ADMIN), 404, "not_found_error")
    assert (await listing(client, store["id"]))["data"] == []
    # The tombstone is still there for sync, through the write API.
    assert (await ok(await client.get(f"/api/v1/memories/{m['id']}", headers=ADMIN)))[
        "status"
    ] == "deleted"


async def test_memories_are_scoped_to_their_store(client: Client) -> None:
    a, b = await new_store(client, "a"), await new_store(client, "b")
    m = await put(client, a["id"], "x.md")
    await plain_error(
        await client.get(f"{BASE}/{b['id']}/memories/{m['id']}", headers=ADMIN),
        404,
        "not_found_error",
    )
    fact = await ok(
        await client.post(
            "/api/v1/memories", json={"text": "a fact", "store": a["id"]}, headers=ADMIN
        ),
        201,
    )
    # Facts without a path live in browse and search, not in this face.
    await plain_error(
        await client.get(f"{BASE}/{a['id']}/memories/{fact['id']}", headers=ADMIN),
        404,
        "not_found_error",
    )
    assert [e["path"] for e in (await listing(client, a["id"]))["data"]] == ["x.md"]


# --- the list -----------------------------------------------------------------------------


async def test_list_shape(client: Client) -> None:
    store = await new_store(client)
    assert await listing(client, store["id"]) == {
        "data": [],
        "first_id": None,
        "last_id": None,
        "has_more": False,
    }
    m = await put(
        client,
        store["id"],
        "decisions/arch-choice.md",
        "x" * 99,
        metadata={"owner": "backend-team"},
    )
    page = await listing(client, store["id"])
    [item] = page["data"]
    assert set(item) == LIST_ITEM  # no content in list items
    assert item == {k: v for k, v in m.items() if k != "content"}
    assert (page["first_id"], page["last_id"], page["has_more"]) == (m["id"], m["id"], False)


@pytest.mark.parametrize(
    "query", ["limit=0", "limit=101", "limit=ten", "limit=-1", "after_id=x&before_id=y"]
)
async def test_list_bad_parameters(client: Client, query: str) -> None:
    store = await new_store(client)
    await plain_error(
        await client.get(f"{BASE}/{store['id']}/memories?{query}", headers=ADMIN),
        400,
        "invalid_request_error",
    )


async def test_list_cursor_must_be_a_memory_of_the_store(client: Client) -> None:
    a, b = await new_store(client, "a"), await new_store(client, "b")
    m = await put(client, b["id"], "x.md")
    for param in ("after_id", "before_id"):
        for value in (m["id"], "mem_nope"):
            resp = await client.get(f"{BASE}/{a['id']}/memories?{param}={value}", headers=ADMIN)
            await plain_error(resp, 400, "invalid_request_error")


async def test_a_deleted_memory_still_anchors_the_next_page(client: Client) -> None:
    """A client paging through the list is not refused because the last memory it saw
    was deleted meanwhile: the page goes on from its path."""
    store = await new_store(client)
    made = [await put(client, store["id"], f"n{i}.md") for i in range(5)]
    first = await listing(client, store["id"], "limit=2")
    assert first["last_id"] == made[1]["id"]
    await ok(await client.delete(f"{BASE}/{store['id']}/memories/{made[1]['id']}", headers=ADMIN))
    rest = await listing(client, store["id"], f"limit=2&after_id={made[1]['id']}")
    assert [e["path"] for e in rest["data"]] == ["n2.md", "n3.md"] and rest["has_more"] is True
    back = await listing(client, store["id"], f"before_id={made[1]['id']}")
    assert [e["path"] for e in back["data"]] == ["n0.md"] and back["has_more"] is False


async def test_a_deleted_anchor_whose_path_was_taken_again_keeps_the_order(
    client: Client,
) -> None:
    """After deleting a.md (A), a new a.md (B) sorts after A in (path, id) order: a page
    after A starts with B, a page before B ends with A, restored."""
    store = await new_store(client)
    base = f"{BASE}/{store['id']}/memories"
    a = await put(client, store["id"], "a.md")
    await put(client, store["id"], "b.md")
    await ok(await client.delete(f"{base}/{a['id']}", headers=ADMIN))
    b = await put(client, store["id"], "a.md")
    after = await listing(client, store["id"], f"after_id={a['id']}")
    assert [e["id"] for e in after["data"]][:1] == [b["id"]]
    assert [e["path"] for e in after["data"]] == ["a.md", "b.md"]
    await ok(await client.delete(f"{base}/{b['id']}", headers=ADMIN))
    resp = await client.patch(
        f"/api/v1/memories/{a['id']}", json={"status": "active"}, headers=ADMIN
    )
    assert resp.status == 200, await resp.text()
    before = await listing(client, store["id"], f"before_id={b['id']}")
    assert [e["id"] for e in before["data"]] == [a["id"]]


async def test_paging_forward_and_backward_reproduces_the_order(client: Client) -> None:
    store = await new_store(client)
    paths = [f"dir{i % 3}/file{i:02d}.md" for i in range(23)] + [
        "a.md",
        "Z.md",
        "é.md",
        "~.md",
        "dir1",
    ]
    for p in paths:
        await put(client, store["id"], p)
    expected = sorted(paths, key=lambda p: p.encode("utf-8"))  # byte order
    assert [
        e["path"] for e in (await listing(client, store["id"], "limit=100"))["data"]
    ] == expected
    assert len((await listing(client, store["id"]))["data"]) == 20  # default limit

    forward: list[str] = []
    page = await listing(client, store["id"], "limit=4")
    while True:
        forward += [e["path"] for e in page["data"]]
        assert (
            page["first_id"] == page["data"][0]["id"] and page["last_id"] == page["data"][-1]["id"]
        )
        if not page["has_more"]:
            break
        page = await listing(client, store["id"], f"limit=4&after_id={page['last_id']}")
    assert forward == expected

    backward: list[str] = []
    last_id = (await listing(client, store["id"], "limit=100"))["data"][-1]["id"]
    backward.insert(0, expected[-1])
    page = await listing(client, store["id"], f"limit=5&before_id={last_id}")
    while True:
        paths_here = [e["path"] for e in page["data"]]
        assert paths_here == sorted(paths_here, key=lambda p: p.encode())  # pages stay ascending
        backward = paths_here + backward
        if not page["has_more"]:
            break
        page = await listing(client, store["id"], f"limit=5&before_id={page['first_id']}")
    assert backward == expected


async def test_path_prefix_is_a_plain_string_prefix(client: Client) -> None:
    store = await new_store(client)
    for p in [
        "a/b",
        "a/bc.md",
        "a/b/c.md",
        "a/c.md",
        "ab.md",
        "a%b.md",
        "a_b.md",
        "aXb.md",
        "b.md",
    ]:
        await put(client, store["id"], p)

    async def prefixed(prefix: str) -> list[str]:
        from urllib.parse import quote

        page = await listing(client, store["id"], f"path_prefix={quote(prefix)}")
        return [e["path"] for e in page["data"]]

    assert await prefixed("a/b") == ["a/b", "a/b/c.md", "a/bc.md"]
    assert await prefixed("a%") == ["a%b.md"]
    assert await prefixed("a_") == ["a_b.md"]
    assert await prefixed("a/") == ["a/b", "a/b/c.md", "a/bc.md", "a/c.md"]
    assert await prefixed("zzz") == []
    assert len(await prefixed("")) == 9
    # Paging inside a prefix.
    page = await listing(client, store["id"], "path_prefix=a/&limit=2")
    assert [e["path"] for e in page["data"]] == ["a/b", "a/b/c.md"] and page["has_more"]
    page = await listing(client, store["id"], f"path_prefix=a/&limit=2&after_id={page['last_id']}")
    assert [e["path"] for e in page["data"]] == ["a/bc.md", "a/c.md"] and not page["has_more"]


async def test_prefix_listing_is_an_index_range_scan(conn: asyncpg.Connection) -> None:
    from service.queries import stores

    await conn.execute(
        "SET enable_seqscan = off"
    )  # tiny table: make the planner show its index choice
    listing = stores.LIST_AFTER_BOUNDED
    values = {
        "workspace": "w", "store": "s", "prefix": "a/b", "cursor": "", "cursor_id": "",
        "limit": 21,
        "is_service": True, "member": None, "rooms": [], "upper": "a/c",
    }  # fmt: skip
    plan = "\n".join(
        r[0] for r in await conn.fetch("EXPLAIN " + listing.sql, *listing.args(values))
    )
    assert "memories_path_key" in plan
    assert "path >=" in plan and "path <" in plan and "~~" not in plan  # a range, not LIKE


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("a/b", "a/c"),
        ("a", "b"),
        ("", None),
        ("z\U0010ffff", "{"),
        ("\U0010ffff", None),
        ("\ud7ff", "\ue000"),
    ],
)
def test_successor(prefix: str, expected: str | None) -> None:
    from service.queries.stores import successor

    assert successor(prefix) == expected


async def test_path_memories_are_embedded_and_browsable(client: Client, db_url: str) -> None:
    from embeddings.model import SentenceTransformerEmbedder
    from embeddings.worker import Worker
    from service.ops import db
    from service.settings import Settings

    store = await new_store(client)
    m = await put(client, store["id"], "people/dave.md", "Dave prefers squash merges.")
    page = await ok(await client.get(f"/api/v1/memories?store={store['id']}", headers=ADMIN))
    assert [x["id"] for x in page["data"]] == [m["id"]]
    pool = await db.create_pool(db_url, Settings(database_url=db_url, pool_min=1, pool_max=2))
    try:
        assert await Worker(pool, SentenceTransformerEmbedder()).drain() == 1
    finally:
        await pool.close()
    assert (await ok(await client.get(f"/api/v1/memories/{m['id']}", headers=ADMIN)))[
        "embeddingStatus"
    ] == "ready"


async def test_personal_keys_see_only_readable_path_memories(client: Client) -> None:
    from tests.helpers import make_member

    await make_member(client, "alice")
    alice = auth(
        await make_key(
            client, kind="personal", member="alice", scopes=["memory:read", "memory:write"]
        )
    )
    store = await new_store(client)
    await put(client, store["id"], "shared.md")
    secret = {"text": "x", "path": "secret.md", "store": store["id"], "scope": "pair:bob:bot"}
    hidden = await ok(await client.post("/api/v1/memories", json=secret, headers=ADMIN), 201)
    page = await ok(await client.get(f"{BASE}/{store['id']}/memories", headers=alice))
    assert [e["path"] for e in page["data"]] == ["shared.md"]
    resp = await client.get(f"{BASE}/{store['id']}/memories/{hidden['id']}", headers=alice)
    await plain_error(resp, 404, "not_found_error")
    resp = await client.get(f"{BASE}/{store['id']}/memories?after_id={hidden['id']}", headers=alice)
    await plain_error(resp, 400, "invalid_request_error")
