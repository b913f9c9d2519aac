"""``GET /api/v1/activity`` (memories written per day and store) and versions with their
text (``?include=text``): the two reads behind the page's Overview and diffs, each held to
the readability rule with two keys that see different things."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from aiohttp import web

from service.app_keys import METER, POOL, TOUCHER
from service.ops import db, jobs
from service.ops.meter import Meter
from service.ops.toucher import Toucher
from service.queries import tenancy, usage
from service.settings import Settings
from tests.helpers import ADMIN, Client, auth, make_key, make_member


async def _write(client: Client, body: dict[str, Any]) -> str:
    resp = await client.post("/api/v1/memories", json=body, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    memory_id: str = (await resp.json())["id"]
    return memory_id


async def _activity(client: Client, key: dict[str, str], query: str = "") -> Any:
    resp = await client.get(f"/api/v1/activity{query}", headers=key)
    assert resp.status == 200, await resp.text()
    return (await resp.json())["data"]


async def test_written_per_day_and_store_counts_what_the_key_may_read(
    client: Client, conn: asyncpg.Connection
) -> None:
    resp = await client.post("/api/v1/forward/memory_stores", json={"name": "ops"}, headers=ADMIN)
    assert resp.status == 201
    await make_member(client, "alice")
    alice = auth(await make_key(client, kind="personal", member="alice", scopes=["memory:read"]))
    for text in ("one", "two"):
        await _write(client, {"text": f"default {text}"})
    await _write(client, {"text": "ops note", "store": "ops"})
    hidden = await _write(client, {"text": "bob only", "scope": "pair:bob:bot"})
    # Written three days ago (as a sync would date it): its own day.
    old = await _write(client, {"text": "from before"})
    when = datetime.now(UTC) - timedelta(days=3)
    await conn.execute("UPDATE memories SET created_at = $1 WHERE id = $2", when, old)
    today, then = datetime.now(UTC).date().isoformat(), when.date().isoformat()

    assert await _activity(client, ADMIN) == [
        {"day": then, "store": "default", "written": 1},
        {"day": today, "store": "default", "written": 3},
        {"day": today, "store": "ops", "written": 1},
    ]
    # Alice cannot read bob's pair: it is not in her count, nor anywhere in the answer.
    mine = await _activity(client, alice)
    assert {"day": today, "store": "default", "written": 2} in mine
    assert hidden not in str(mine)
    # A deleted memory still counts (it was written that day); a range leaves days out.
    await client.delete(f"/api/v1/memories/{hidden}", headers=ADMIN)
    assert await _activity(client, ADMIN, f"?from={today}") == [
        {"day": today, "store": "default", "written": 3},
        {"day": today, "store": "ops", "written": 1},
    ]
    assert await _activity(client, ADMIN, f"?from={then}&to={then}") == [
        {"day": then, "store": "default", "written": 1}
    ]


@pytest.mark.parametrize(
    "query",
    ["?from=yesterday", "?to=2026-13-01", "?from=2026-02-01&to=2026-01-01",
     "?from=2024-01-01&to=2026-01-01", "?from=20260101"],
)  # fmt: skip
async def test_a_bad_range_is_a_400(client: Client, query: str) -> None:
    resp = await client.get(f"/api/v1/activity{query}", headers=ADMIN)
    assert resp.status == 400, await resp.text()
    assert (await resp.json())["error"]["type"] == "invalid_request_error"


async def test_versions_carry_their_text_only_when_asked_and_only_for_readers(
    client: Client,
) -> None:
    await make_member(client, "alice")
    alice = auth(await make_key(client, kind="personal", member="alice", scopes=["memory:read"]))
    shared = await _write(client, {"text": "The tea is green."})
    resp = await client.patch(
        f"/api/v1/memories/{shared}", json={"text": "The tea is black."}, headers=ADMIN
    )
    assert resp.status == 200
    plain = await (await client.get(f"/api/v1/memories/{shared}/versions", headers=ADMIN)).json()
    assert all("text" not in v for v in plain["data"])  # the SPEC's shape, unless asked
    resp = await client.get(f"/api/v1/memories/{shared}/versions?include=text", headers=alice)
    assert resp.status == 200
    body = await resp.json()
    assert [v["text"] for v in body["data"]] == ["The tea is black.", "The tea is green."]
    assert [{k: v for k, v in ver.items() if k != "text"} for ver in body["data"]] == plain["data"]

    secret = await _write(client, {"text": "bob's draft", "scope": "pair:bob:bot"})
    resp = await client.get(f"/api/v1/memories/{secret}/versions?include=text", headers=alice)
    assert resp.status == 404
    assert "bob's draft" not in await resp.text()

    resp = await client.get(f"/api/v1/memories/{shared}/versions?include=content", headers=ADMIN)
    assert resp.status == 400
    assert (await resp.json())["error"]["type"] == "invalid_request_error"


async def test_a_version_written_in_a_narrower_scope_keeps_its_text_there(
    client: Client,
) -> None:
    """SPEC §9: widening a memory's scope shows its readers what it says now, not what it
    said while only bob and the bot could read it. The widening is a version itself."""
    await make_member(client, "alice")
    alice = auth(await make_key(client, kind="personal", member="alice", scopes=["memory:read"]))
    secret = await _write(client, {"text": "Root password is hunter2.", "scope": "pair:bob:bot"})
    resp = await client.patch(
        f"/api/v1/memories/{secret}",
        json={"text": "The root password is in the vault.", "scope": "workspace"},
        headers=ADMIN,
    )
    assert resp.status == 200
    resp = await client.get(f"/api/v1/memories/{secret}/versions?include=text", headers=alice)
    assert resp.status == 200 and "hunter2" not in await resp.text()
    seen = (await resp.json())["data"]
    assert [v["text"] for v in seen] == ["The root password is in the vault.", None]
    # Nor its sha256, which would confirm a guess of the old text offline.
    old_sha = hashlib.sha256(b"Root password is hunter2.").hexdigest()
    assert old_sha not in await resp.text() and seen[1]["content_sha256"] is None
    plain = await client.get(f"/api/v1/memories/{secret}/versions", headers=alice)
    assert old_sha not in await plain.text()
    got = await client.get(f"/api/v1/memories/{secret}/versions?include=text", headers=ADMIN)
    assert [v["content_sha256"] for v in (await got.json())["data"]][1] == old_sha
    assert [v["text"] for v in (await got.json())["data"]][1] == "Root password is hunter2."
    # A change of scope alone is a version too: who moved it, and when.
    resp = await client.patch(
        f"/api/v1/memories/{secret}", json={"scope": "pair:bob:bot"}, headers=ADMIN
    )
    assert resp.status == 200
    plain = await (await client.get(f"/api/v1/memories/{secret}/versions", headers=ADMIN)).json()
    assert [v["operation"] for v in plain["data"]] == ["modified", "modified", "created"]


async def test_a_usage_read_waits_for_the_flush_already_in_flight(db_url: str) -> None:
    """The Overview read 0 searches once: the background flush had taken the pending units
    and not yet committed, so the read's own flush found nothing and read too early. A
    flush now returns only once every unit added before it is written."""
    pool = await db.create_pool(db_url, Settings(database_url=db_url, pool_min=1, pool_max=3))
    blocker = await asyncpg.connect(db_url)
    try:
        async with pool.acquire() as conn:
            ws = await tenancy.create_workspace(conn, "metered", "scale")
        assert ws is not None
        meter = Meter()
        meter.add(ws.id, "search", 1.0)
        await meter.flush(pool)  # the day's row exists
        # Another transaction holds that row: the next flush's upsert waits for it.
        await blocker.execute("BEGIN")
        await blocker.execute("SELECT 1 FROM usage_daily WHERE workspace_id = $1 FOR UPDATE", ws.id)
        meter.add(ws.id, "search", 2.5)
        in_flight = asyncio.create_task(meter.flush(pool))
        await asyncio.sleep(0.2)
        reader = asyncio.create_task(meter.flush(pool))  # what GET /api/v1/usage does
        await asyncio.sleep(0.3)
        assert not reader.done()  # it waits for the flush in flight, not for nothing
        await blocker.execute("COMMIT")
        await asyncio.wait_for(asyncio.gather(in_flight, reader), 10)
        today = datetime.now(UTC).date()
        [day] = await usage.days(pool, ws.id, today, today)
        assert (day.requests, day.units) == (2, 3.5)
    finally:
        await blocker.close()
        await pool.close()


async def test_usage_and_stamps_lost_at_shutdown_are_logged_with_their_counts(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The shutdown flush failed (the database gone) and said nothing of what it lost."""
    pool = await db.create_pool(db_url, Settings(database_url=db_url, pool_min=1, pool_max=1))
    await pool.close()  # every flush now fails
    app = web.Application()
    app[METER], app[TOUCHER], app[POOL] = Meter(), Toucher(), pool
    for units in (1.0, 2.5):
        app[METER].add("ws_a", "search", units)
    app[METER].add("ws_b", "search", 1.0)
    app[TOUCHER].add("ws_a", ["mem_1", "mem_2"])
    app[TOUCHER].add("ws_b", ["mem_3"])
    with caplog.at_level(logging.ERROR, logger="mneme.app"):
        await jobs.flush_before_stopping(app)
    said = {r.getMessage(): r.__dict__ for r in caplog.records}
    usage_lost = said["usage lost: could not record it before stopping"]
    assert (usage_lost["requests"], usage_lost["units"]) == (3, 4.5)
    stamps_lost = said["last_used_at stamps lost: could not record them before stopping"]
    assert stamps_lost["memories"] == 3
