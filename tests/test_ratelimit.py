"""Rate limits hold across service instances because PostgreSQL keeps the count."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import asyncpg
import pytest

from service.queries import keys, ratelimit
from service.settings import Settings
from tests.helpers import Client, auth, free_workspace_key

MakeClient = Callable[[Settings], Awaitable[Client]]


async def test_two_instances_share_one_limit(
    make_client: MakeClient, settings: Settings, db_url: str
) -> None:
    limited = settings.with_overrides(rate_limits={"free": 6, "pro": 600, "scale": 100_000})
    first, second = await make_client(limited), await make_client(limited)
    headers = auth(await free_workspace_key(db_url, "small"))

    statuses = []
    for i in range(6):
        instance = first if i % 2 == 0 else second
        statuses.append((await instance.get("/api/v1/members", headers=headers)).status)
    assert statuses == [200] * 6
    # The seventh request is over the limit whichever instance it reaches.
    for instance in (first, second):
        resp = await instance.get("/api/v1/members", headers=headers)
        assert resp.status == 429
        assert int(resp.headers["Retry-After"]) >= 1


async def test_limits_are_per_workspace_and_per_tier(
    make_client: MakeClient, settings: Settings, db_url: str
) -> None:
    client = await make_client(
        settings.with_overrides(rate_limits={"free": 2, "pro": 600, "scale": 100_000})
    )
    free = auth(await free_workspace_key(db_url, "small"))
    for _ in range(2):
        assert (await client.get("/api/v1/members", headers=free)).status == 200
    assert (await client.get("/api/v1/members", headers=free)).status == 429
    # The bootstrap workspace is on "scale" and unaffected.
    from tests.helpers import ADMIN

    assert (await client.get("/api/v1/members", headers=ADMIN)).status == 200


async def test_unauthenticated_requests_do_not_count(
    make_client: MakeClient, settings: Settings, db_url: str
) -> None:
    client = await make_client(
        settings.with_overrides(rate_limits={"free": 2, "pro": 600, "scale": 100_000})
    )
    good = await free_workspace_key(db_url, "small")
    for _ in range(10):
        assert (await client.get("/api/v1/members", headers=auth("wrong-" + good))).status == 401
    assert (await client.get("/api/v1/members", headers=auth(good))).status == 200


async def test_refused_requests_are_not_counted(conn: asyncpg.Connection) -> None:
    await conn.execute("INSERT INTO workspaces (id, name, tier) VALUES ('w1', 'w1', 'free')")
    results = [await ratelimit.hit(conn, "w1", 3) for _ in range(8)]
    assert [r.allowed for r in results] == [True] * 3 + [False] * 5
    count = await conn.fetchval(
        "SELECT sum(count) FROM rate_limit_counters WHERE workspace_id = 'w1'"
    )
    assert count == 3


async def elapsed_fraction(conn: asyncpg.Connection) -> float:
    """How much of the current minute has gone, by the transaction's now()."""
    elapsed: float = await conn.fetchval(
        "SELECT extract(epoch FROM now() - date_trunc('minute', now()))::float8 / 60"
    )
    return elapsed


async def test_previous_minute_weighs_on_the_current_one(conn: asyncpg.Connection) -> None:
    # A full previous minute: 10 requests at a limit of 10. Early in the next minute most
    # of that weight remains, so only a few more requests fit, not another 10.
    # One transaction, so one now(): a minute ending midway would make the row two old.
    async with conn.transaction():
        await conn.execute(
            "INSERT INTO rate_limit_counters (workspace_id, window_start, count) "
            "VALUES ('w2', date_trunc('minute', now()) - interval '1 minute', 10)"
        )
        elapsed = await elapsed_fraction(conn)
        allowed = sum([(await ratelimit.hit(conn, "w2", 10)).allowed for _ in range(12)])
    # The estimate admits requests while 10 * (1 - elapsed) + n <= 10.
    expected = int(10 - 10 * (1 - elapsed) + 1e-9)
    assert abs(allowed - expected) <= 1
    assert allowed < 10


async def test_a_workspace_quiet_for_the_last_minute_is_never_refused(
    conn: asyncpg.Connection,
) -> None:
    # The previous minute used the whole limit, but its last request was 61 s ago: the
    # last 60 s hold no request. The estimate (10 * (1 - elapsed) + 1 > 10 early in a
    # minute) refused this request before 0023; a waiting client is let through.
    await conn.execute(
        "INSERT INTO rate_limit_counters (workspace_id, window_start, count, last_at) "
        "VALUES ('w3', date_trunc('minute', now()) - interval '1 minute', 10, "
        "        now() - interval '61 seconds')"
    )
    results = [await ratelimit.hit(conn, "w3", 10) for _ in range(11)]
    assert [r.allowed for r in results] == [True] * 10 + [False]
    assert 1 <= results[-1].retry_after <= 60
    # Its last request within the window, the previous minute still weighs.
    async with conn.transaction():  # one now(), as above
        await conn.execute(
            "UPDATE rate_limit_counters SET last_at = now() - interval '59 seconds' "
            "WHERE workspace_id = 'w3' AND window_start < date_trunc('minute', now())"
        )
        await conn.execute(
            "DELETE FROM rate_limit_counters "
            "WHERE workspace_id = 'w3' AND window_start = date_trunc('minute', now())"
        )
        elapsed = await elapsed_fraction(conn)
        allowed = sum([(await ratelimit.hit(conn, "w3", 10)).allowed for _ in range(12)])
    assert abs(allowed - int(10 - 10 * (1 - elapsed) + 1e-9)) <= 1


@pytest.mark.parametrize(
    ("limit", "current", "previous", "elapsed", "expected"),
    [
        (10, 10, 0, 0.5, 30 + 6),  # full minute: wait for it to end, then 1/10 of the next
        (10, 5, 10, 0.25, 21),  # 10 * (1 - t) + 6 <= 10 first at t = 0.6: 21 s after 0.25
        # Never past 60 s: by then the minute's last request has left the window (these
        # were 66 and 61 before 0023, for a limit that was free again after 60).
        (10, 10, 0, 0.0, 60),
        (1, 1, 0, 0.99, 60),
    ],
)
def test_retry_after_is_when_the_estimate_first_admits_a_request(
    limit: int, current: int, previous: int, elapsed: float, expected: int
) -> None:
    assert ratelimit.retry_after(limit, current, previous, elapsed) == expected


async def test_the_key_check_commits_its_count_without_a_disk_flush(
    conn: asyncpg.Connection, db_url: str
) -> None:
    # Every request's rate-limit hit is a write; it commits lazily (synchronous_commit off
    # for its own transaction), and the session keeps its setting for what follows.
    secret = await free_workspace_key(db_url, "small")
    workspace_id = await keys.key_workspace(conn, secret)
    limits = {"free": 60, "pro": 600, "scale": 6000}
    assert await conn.fetchval("SHOW synchronous_commit") == "on"
    async with conn.transaction():
        found = await keys.authenticate_and_count(conn, secret, limits)
        assert found is not None and found[1].allowed
        assert await conn.fetchval("SHOW synchronous_commit") == "off"
    assert await conn.fetchval("SHOW synchronous_commit") == "on"
    counted = "SELECT sum(count) FROM rate_limit_counters WHERE workspace_id = $1"
    assert await conn.fetchval(counted, workspace_id) == 1
    # An unknown key matches no row: nothing counted, and nothing changed for the session.
    assert await keys.authenticate_and_count(conn, "wrong-" + secret, limits) is None
    assert await conn.fetchval("SHOW synchronous_commit") == "on"
