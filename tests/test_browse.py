"""Browse face (seed 000 and SPEC §3.2), sentence by sentence."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import asyncpg
import pytest

from tests.helpers import ADMIN, Client, auth, make_key, make_member, write

OBJECT_FIELDS = {
    "id", "text", "scope", "tier", "factType", "status", "provider", "providerRef",
    "entityRefs", "proofCount", "firstSeenAt", "lastUsedAt",
}  # fmt: skip
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


async def browse(
    client: Client, query: str = "", headers: dict[str, str] = ADMIN
) -> dict[str, Any]:
    resp = await client.get(f"/api/v1/memories?{query}", headers=headers)
    assert resp.status == 200, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


def texts(page: dict[str, Any]) -> list[str]:
    return [m["text"] for m in page["data"]]


async def test_reads_need_the_read_scope(client: Client) -> None:
    writer = await make_key(client, kind="service", scopes=["memory:write"])
    resp = await client.get("/api/v1/memories", headers=auth(writer))
    assert resp.status == 403
    assert (await client.get("/api/v1/memories")).status == 401


async def test_response_shape_and_memory_object_fields(client: Client) -> None:
    await write(
        client,
        {
            "text": "Cohort runs on Convex.",
            "factType": "world",
            "provider": "hindsight",
            "providerRef": "mem-world-8891",
            "entityRefs": ["entity:cohort"],
            "proofCount": 3,
        },
    )
    page = await browse(client)
    assert set(page) == {"data", "cursor", "hasMore", "meta"}  # never a total
    assert set(page["meta"]) == {"scannedCount", "hiddenObservationCount"}
    [m] = page["data"]
    assert set(m) == OBJECT_FIELDS
    assert (m["text"], m["scope"], m["tier"], m["factType"], m["status"]) == (
        "Cohort runs on Convex.", "workspace", "hindsight", "world", "active",
    )  # fmt: skip
    assert (m["provider"], m["providerRef"], m["entityRefs"], m["proofCount"]) == (
        "hindsight", "mem-world-8891", ["entity:cohort"], 3,
    )  # fmt: skip
    assert ISO_MS.match(m["firstSeenAt"]) and ISO_MS.match(m["lastUsedAt"])
    assert (page["cursor"], page["hasMore"]) == (None, False)


async def test_null_fact_type_and_proof_count_are_null(client: Client) -> None:
    await write(client, {"text": "Dave prefers squash merges.", "tier": "core"})
    [m] = (await browse(client))["data"]
    assert m["factType"] is None and m["proofCount"] is None and m["entityRefs"] == []


async def test_window_is_newest_first_and_survivors_sort_by_last_used(client: Client) -> None:
    # Created a, b, c, d (d newest); last used in the order b, d, a, c (c most recently).
    await write(
        client,
        {"text": "a", "firstSeenAt": "2025-01-01T00:00:00Z", "lastUsedAt": "2025-01-03T00:00:00Z"},
        {"text": "b", "firstSeenAt": "2025-01-01T00:00:00Z", "lastUsedAt": "2025-01-01T00:00:00Z"},
        {"text": "c", "firstSeenAt": "2025-01-01T00:00:00Z", "lastUsedAt": "2025-01-04T00:00:00Z"},
        {"text": "d", "firstSeenAt": "2025-01-01T00:00:00Z", "lastUsedAt": "2025-01-02T00:00:00Z"},
    )
    page = await browse(client, "limit=3")  # window: d, c, b
    assert texts(page) == ["c", "d", "b"]
    assert page["hasMore"] is True and page["meta"]["scannedCount"] == 3
    rest = await browse(client, f"limit=3&cursor={page['cursor']}")
    assert texts(rest) == ["a"]
    assert (rest["hasMore"], rest["cursor"]) == (False, None)


async def test_equal_last_used_ties_break_on_id_descending(client: Client) -> None:
    same = {"firstSeenAt": "2025-01-01T00:00:00Z", "lastUsedAt": "2025-01-01T00:00:00Z"}
    ids = await write(client, {"text": "x", **same}, {"text": "y", **same}, {"text": "z", **same})
    assert [m["id"] for m in (await browse(client))["data"]] == sorted(ids, reverse=True)


async def test_filters_apply_to_the_window_so_data_can_be_short_while_has_more(
    client: Client,
) -> None:
    await write(client, *({"text": f"hindsight {i}"} for i in range(4)))
    await write(client, *({"text": f"core {i}", "tier": "core"} for i in range(3)))
    page = await browse(client, "tier=hindsight&limit=3")  # window: the three core rows
    assert page["data"] == [] and page["hasMore"] is True
    assert page["meta"]["scannedCount"] == 3
    seen: list[str] = []
    while True:
        seen += texts(page)
        if not page["hasMore"]:
            break
        page = await browse(client, f"tier=hindsight&limit=3&cursor={page['cursor']}")
    assert sorted(seen) == [f"hindsight {i}" for i in range(4)]


async def test_tier_filter_takes_comma_separated_values(client: Client) -> None:
    await write(client, {"text": "c", "tier": "core"}, {"text": "h"})
    assert texts(await browse(client, "tier=core")) == ["c"]
    assert sorted(texts(await browse(client, "tier=core, hindsight"))) == ["c", "h"]
    assert sorted(texts(await browse(client, "tier=core,,"))) == ["c"]
    # A repeated list parameter adds its items, as clients that send arrays write them.
    assert sorted(texts(await browse(client, "tier=core&tier=hindsight"))) == ["c", "h"]
    assert texts(await browse(client, "factType=world&factType=&tier=hindsight")) == []
    refused = await client.get("/api/v1/memories?tier=core&tier=gold", headers=ADMIN)
    assert (await refused.json())["error"]["valid"] == ["core", "hindsight"]
    twice = await client.get("/api/v1/memories?search=c&search=h", headers=ADMIN)
    assert (await twice.json())["error"]["param"] == "search"  # one value, please


@pytest.mark.parametrize(
    "param", ["tier=gold", "tier=core,gold", "status=gone", "status=active,removed"]
)
async def test_invalid_tier_or_status_is_a_400_listing_valid_values(
    client: Client, param: str
) -> None:
    resp = await client.get(f"/api/v1/memories?{param}", headers=ADMIN)
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["type"] == "invalid_request_error"
    if param.startswith("tier"):
        assert error["valid"] == ["core", "hindsight"] and "core, hindsight" in error["message"]
    else:
        assert error["valid"] == ["active", "archived", "deleted"]


@pytest.mark.parametrize(
    "param", ["factType=nonsense", "notFactType=nonsense", "scope=nowhere", "provider=nobody"]
)
async def test_free_form_filters_are_never_rejected(client: Client, param: str) -> None:
    await write(client, {"text": "x", "factType": "world"})
    page = await browse(client, param)
    if param.startswith("notFactType"):
        assert texts(page) == ["x"]
    else:
        assert page["data"] == []


async def test_status_defaults_to_active_and_takes_several(client: Client) -> None:
    _, b, c = await write(client, {"text": "active"}, {"text": "archived"}, {"text": "deleted"})
    await client.patch(f"/api/v1/memories/{b}", json={"status": "archived"}, headers=ADMIN)
    await client.delete(f"/api/v1/memories/{c}", headers=ADMIN)
    assert texts(await browse(client)) == ["active"]
    assert texts(await browse(client, "status=archived")) == ["archived"]
    assert sorted(texts(await browse(client, "status=archived,deleted"))) == ["archived", "deleted"]
    page = await browse(client, "status=active")
    assert page["meta"]["scannedCount"] == 3  # status is a filter on the window, not the window


async def test_fact_type_filters(client: Client) -> None:
    await write(
        client,
        {"text": "world fact", "factType": "world"},
        {"text": "experience", "factType": "experience"},
        {"text": "untyped"},
        {"text": "core world", "tier": "core", "factType": "world"},
    )
    assert sorted(texts(await browse(client, "factType=world"))) == ["core world", "world fact"]
    assert sorted(texts(await browse(client, "factType=world,experience"))) == [
        "core world", "experience", "world fact",
    ]  # fmt: skip
    # A null fact type matches no factType filter and survives every notFactType filter.
    assert sorted(texts(await browse(client, "notFactType=world"))) == ["experience", "untyped"]
    assert sorted(texts(await browse(client, "notFactType=world,experience"))) == ["untyped"]
    # Core rows are not exempt.
    assert texts(await browse(client, "tier=core&notFactType=world")) == []


async def test_observations_are_hidden_by_default_and_counted(client: Client) -> None:
    await write(
        client,
        {"text": "obs 1", "factType": "observation"},
        {"text": "obs 2", "factType": "observation"},
        {"text": "core obs", "tier": "core", "factType": "observation"},
        {"text": "world", "factType": "world"},
        {"text": "archived obs", "factType": "observation", "status": "archived"},
    )
    page = await browse(client)
    assert sorted(texts(page)) == ["core obs", "world"]  # only hindsight observations hide
    # The archived observation failed the status filter first: not counted as hidden.
    assert page["meta"]["hiddenObservationCount"] == 2
    assert page["meta"]["scannedCount"] == 5
    shown = await browse(client, "factType=observation")
    assert sorted(texts(shown)) == ["core obs", "obs 1", "obs 2"]
    assert shown["meta"]["hiddenObservationCount"] == 0
    # Any fact-type filter, even a negated one, turns the default off.
    negated = await browse(client, "notFactType=world")
    assert sorted(texts(negated)) == ["core obs", "obs 1", "obs 2"]
    assert negated["meta"]["hiddenObservationCount"] == 0
    # Other filters still apply before the rule: a search that misses is not "hidden".
    assert (await browse(client, "search=world"))["meta"]["hiddenObservationCount"] == 0


async def test_scope_and_provider_filters_are_exact(client: Client) -> None:
    await write(
        client,
        {"text": "ws", "provider": "hindsight"},
        {"text": "room", "scope": "room:eng", "provider": "hermes-core"},
        {"text": "room2", "scope": "room:engineering"},
    )
    assert texts(await browse(client, "scope=room:eng")) == ["room"]
    assert texts(await browse(client, "provider=hindsight")) == ["ws"]
    assert texts(await browse(client, "provider=hermes")) == []


async def test_search_is_a_case_insensitive_literal_substring(client: Client) -> None:
    await write(
        client,
        {"text": "Cohort runs on CONVEX."},
        {"text": "100% sure"},
        {"text": "1000 sure"},
        {"text": "snake_case name"},
        {"text": "snakeXcase name"},
        {"text": "back\\slash"},
        {"text": "backslash"},
    )
    assert texts(await browse(client, "search=convex")) == ["Cohort runs on CONVEX."]
    assert texts(await browse(client, "search=100%25")) == ["100% sure"]
    assert texts(await browse(client, "search=snake_case")) == ["snake_case name"]
    assert texts(await browse(client, "search=k%5Cs")) == ["back\\slash"]


async def test_limit_rules(client: Client) -> None:
    await write(client, *({"text": f"m{i}"} for i in range(30)))
    assert len((await browse(client))["data"]) == 25  # default
    capped = await browse(client, "limit=500")
    assert capped["meta"] == {
        "scannedCount": 30,
        "hiddenObservationCount": 0,
        "limitCapped": True,
        "maxLimit": 100,
    }
    assert "limitCapped" not in (await browse(client, "limit=100"))["meta"]
    for bad in ("0", "-1", "ten", "2.5", "1e3", "%20"):
        resp = await client.get(f"/api/v1/memories?limit={bad}", headers=ADMIN)
        assert resp.status == 400, bad
        assert (await resp.json())["error"]["param"] == "limit"


async def test_empty_parameters_mean_absent(client: Client) -> None:
    await write(
        client, {"text": "core", "tier": "core"}, {"text": "obs", "factType": "observation"}
    )
    page = await browse(
        client,
        "tier=&status=&factType=&notFactType=&scope=&provider=&search=&limit=&cursor=&store=",
    )
    assert texts(page) == ["core"]
    assert page["meta"]["hiddenObservationCount"] == 1


@pytest.mark.parametrize(
    "cursor",
    ["garbage", "bWVt", "MTIzOm5vdC1hLW1lbQ", "!!!", "OTk5OTk5OTk5OTk5OTk5OTk5OTk6bWVtX3g"],
)
async def test_malformed_cursor_scans_from_the_top(client: Client, cursor: str) -> None:
    await write(client, {"text": "first"}, {"text": "second"})
    page = await browse(client, f"cursor={cursor}")
    assert sorted(texts(page)) == ["first", "second"]


async def test_store_narrows_the_window(client: Client, conn: asyncpg.Connection) -> None:
    await conn.execute(
        "INSERT INTO stores (workspace_id, id, name) "
        "SELECT workspace_id, 'memstore_other', 'other' FROM stores LIMIT 1"
    )
    await write(client, {"text": "in default"}, {"text": "in other", "store": "other"})
    assert sorted(texts(await browse(client))) == ["in default", "in other"]  # all stores
    assert texts(await browse(client, "store=other")) == ["in other"]
    assert texts(await browse(client, "store=memstore_other")) == ["in other"]
    assert (await client.get("/api/v1/memories?store=nope", headers=ADMIN)).status == 404


async def test_unreadable_rows_never_appear_and_never_count(client: Client) -> None:
    await make_member(client, "alice")
    await make_member(client, "bob")
    await client.post("/api/v1/rooms", json={"id": "eng", "members": ["alice"]}, headers=ADMIN)
    await client.post("/api/v1/rooms", json={"id": "sales", "members": ["bob"]}, headers=ADMIN)
    alice = auth(await make_key(client, kind="personal", member="alice", scopes=["memory:read"]))
    await write(
        client,
        {"text": "for all"},
        {"text": "eng room", "scope": "room:eng"},
        {"text": "sales room", "scope": "room:sales"},
        {"text": "alice and bot", "scope": "pair:alice:bot"},
        {"text": "bob and bot", "scope": "pair:bob:bot"},
        {"text": "bob and alice", "scope": "pair:bob:alice"},
    )
    page = await browse(client, "limit=10", headers=alice)
    assert sorted(texts(page)) == ["alice and bot", "bob and alice", "eng room", "for all"]
    assert page["meta"]["scannedCount"] == 4
    # Paging with a small window: still never a hidden row, and scannedCount counts only hers.
    page = await browse(client, "limit=1", headers=alice)
    assert page["meta"]["scannedCount"] == 1 and len(page["data"]) == 1
    seen = texts(page)
    while page["hasMore"]:
        page = await browse(client, f"limit=1&cursor={page['cursor']}", headers=alice)
        seen += texts(page)
    assert sorted(seen) == ["alice and bot", "bob and alice", "eng room", "for all"]
    # The last readable row ends the paging: hasMore says nothing about hidden rows.
    assert page["cursor"] is None
    # The service key reads everything.
    assert len((await browse(client, "limit=10"))["data"]) == 6


async def test_other_workspaces_are_invisible(client: Client, db_url: str) -> None:
    from service.queries import keys, tenancy

    await write(client, {"text": "ours"})
    conn = await asyncpg.connect(db_url)
    try:
        ws = await tenancy.create_workspace(conn, "theirs", "free")
        assert ws is not None
        _, secret = await keys.create_key(
            conn, ws.id, kind="service", member=None, scopes=["memory:read"], name=None
        )
    finally:
        await conn.close()
    page = await browse(client, headers=auth(secret))
    assert page["data"] == [] and page["meta"]["scannedCount"] == 0 and page["hasMore"] is False


async def test_paging_visits_every_memory_once_while_writes_continue(client: Client) -> None:
    resp = await client.post(
        "/api/v1/memories",
        json={"memories": [{"text": f"old {i}"} for i in range(60)]},
        headers=ADMIN,
    )
    assert resp.status == 200
    await write(client, *({"text": f"older {i}"} for i in range(15)))
    expected = {f"old {i}" for i in range(60)} | {f"older {i}" for i in range(15)}
    seen: list[str] = []
    page = await browse(client, "limit=7")
    n = 0
    while True:
        seen += texts(page)
        # New memories arrive between pages.
        await write(client, {"text": f"new {n}"})
        n += 1
        if not page["hasMore"]:
            break
        page = await browse(client, f"limit=7&cursor={page['cursor']}")
    old_seen = [t for t in seen if not t.startswith("new ")]
    assert sorted(old_seen) == sorted(expected)  # every one, exactly once
    assert len(seen) == len(set(seen))


async def test_concurrent_writers_do_not_break_paging(client: Client) -> None:
    await write(client, *({"text": f"base {i}"} for i in range(20)))

    async def writer() -> None:
        for i in range(20):
            await write(client, {"text": f"during {i}"})

    async def pager() -> list[str]:
        seen: list[str] = []
        page = await browse(client, "limit=3")
        while True:
            seen += texts(page)
            if not page["hasMore"]:
                return seen
            page = await browse(client, f"limit=3&cursor={page['cursor']}")

    _, seen = await asyncio.gather(writer(), pager())
    base = [t for t in seen if t.startswith("base ")]
    assert sorted(base) == sorted(f"base {i}" for i in range(20))
    assert len(seen) == len(set(seen))


def test_window_columns_come_in_row_field_order() -> None:
    """browse.window builds Row by name from the SELECT list: keep them in step."""
    import dataclasses

    from service.queries import browse as queries

    select = queries.WINDOW.sql.split("FROM (", 1)[0]
    names = [
        part.strip().split()[-1].split(".")[-1]
        for part in select.replace("SELECT", "", 1).split(",")
    ]
    assert names == [f.name for f in dataclasses.fields(queries.Row)]
