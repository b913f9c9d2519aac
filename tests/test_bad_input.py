"""No input is a 500 (SPEC §9): a clear 4xx in the error shape, and nothing stored changes.

Each family of input that once reached PostgreSQL or Python's calendar and failed there
(NUL in any string, integers beyond PostgreSQL's, timestamps past the calendar's ends,
JSON nested a thousand deep) is sent to every endpoint that takes it. Every case is
tried, and all failures are reported together.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest

from tests.helpers import ADMIN, Client

N = "\x00"
TABLES = ("memories", "memory_versions", "stores", "speakers", "members", "rooms", "api_keys")


@dataclass(frozen=True)
class Case:
    method: str
    path: str
    body: Any = None  # JSON, or bytes sent as they are
    status: int = 400
    param: str | None = None  # the parameter the error must name, when there is one

    def __str__(self) -> str:
        shown = self.body if not isinstance(self.body, bytes) else self.body[:40]
        return f"{self.method} {self.path} {shown!r}"[:160]


MEMORY = "/api/v1/memories"
SEARCH = "/api/v1/memory/search"
STORES = "/api/v1/forward/memory_stores"


def memory(**fields: Any) -> dict[str, Any]:
    return {"text": "a fact", **fields}


def search(**fields: Any) -> dict[str, Any]:
    return {"user_id": "default", "query": "a fact", **fields}


NUL_CASES = [
    *(
        Case("POST", MEMORY, memory(**{name: "a" + N}), param=name)
        for name in (
            "text",
            "category",
            "factType",
            "provider",
            "providerRef",
            "store",
            "supersedes",
            "speaker",
            "scope",
            "tier",
            "status",
            "path",
            "eventDate",
        )
    ),
    Case("POST", MEMORY, memory(entityRefs=["ok", "a" + N]), param="entityRefs[1]"),
    Case("POST", MEMORY, memory(metadata={"k": "a" + N}), param="metadata.k"),
    Case("POST", MEMORY, memory(metadata={"a" + N: "v"}), param="metadata"),
    Case(
        "POST",
        MEMORY,
        {"memories": [memory(), memory(category="a" + N)]},
        param="category",
    ),
    Case("POST", MEMORY, {"memories": [memory(image={"data": N, "mimeType": "image/png"})]}),
    # A batch looks up its items' stores before writing any (to lock in one order).
    Case("POST", MEMORY, {"memories": [memory(), memory(store="a" + N)]}, param="store"),
    *(
        Case("PATCH", f"{MEMORY}/mem_0000000000aaaaaaaaaa", {name: value}, param=name)
        for name, value in (
            ("text", N),
            ("category", N),
            ("factType", N),
            ("scope", N),
            ("speaker", N),
            ("expiresAt", N),
        )
    ),
    Case("PATCH", f"{MEMORY}/mem_0000000000aaaaaaaaaa", {"entityRefs": [N]}, param="entityRefs[0]"),
    Case("POST", SEARCH, search(query="a" + N), param="query"),
    Case("POST", SEARCH, search(speaker="a" + N), param="speaker"),
    Case("POST", SEARCH, search(user_id="a" + N), param="user_id"),
    *(
        Case("POST", SEARCH, search(filters={name: "a" + N}), param=f"filters.{name}")
        for name in ("category", "tier", "fact_type", "scope", "entity", "created_after")
    ),
    Case("POST", SEARCH, search(filters={"entity": ["x", N]}), param="filters.entity[1]"),
    *(
        Case("GET", f"{MEMORY}?{name}=a%00", param=name)
        for name in (
            "tier",
            "status",
            "factType",
            "notFactType",
            "scope",
            "provider",
            "search",
            "store",
            "limit",
        )
    ),
    Case("GET", f"{MEMORY}?a%00=1"),
    *(
        Case(method, path, body, param=param)
        for method, path, body, param in (
            ("GET", f"{MEMORY}/a%00", None, "memory_id"),
            ("PATCH", f"{MEMORY}/a%00", {"text": "x"}, "memory_id"),
            ("DELETE", f"{MEMORY}/a%00", None, "memory_id"),
            ("GET", f"{MEMORY}/a%00/versions", None, "memory_id"),
            ("GET", f"{MEMORY}/a%00/media", None, "memory_id"),
            ("GET", "/api/v1/stores/a%00/speakers", None, "store"),
            ("POST", "/api/v1/stores/a%00/speakers", {"name": "x"}, "store"),
            ("DELETE", "/api/v1/stores/default/speakers/a%00", None, "name"),
            ("PUT", "/api/v1/rooms/a%00/members/b", None, "room_id"),
            ("DELETE", "/api/v1/rooms/r/members/a%00", None, "member_id"),
            ("DELETE", "/api/v1/keys/a%00", None, "key_id"),
            ("GET", f"{STORES}/a%00", None, "store_id"),
            ("POST", f"{STORES}/a%00", {"description": "x"}, "store_id"),
            ("DELETE", f"{STORES}/a%00", None, "store_id"),
            ("GET", f"{STORES}/a%00/memories", None, "store_id"),
            ("POST", f"{STORES}/a%00/memories", {"path": "a", "content": "b"}, "store_id"),
            ("GET", f"{STORES}/default/memories/a%00", None, "memory_id"),
            ("POST", f"{STORES}/default/memories/a%00", {"content": "b"}, "memory_id"),
            ("DELETE", f"{STORES}/default/memories/a%00", None, "memory_id"),
            ("GET", f"{STORES}/default/memories/a%00/versions", None, "memory_id"),
            ("GET", f"{STORES}/default/memories?path_prefix=a%00", None, "path_prefix"),
            ("GET", f"{STORES}/default/memories?after_id=a%00", None, "after_id"),
            ("GET", f"{STORES}?before_id=a%00", None, "before_id"),
            ("GET", "/api/v1/usage?from=a%00", None, "from"),
        )
    ),
    Case("POST", STORES, {"name": "s1", "description": "a" + N}, param="description"),
    Case("POST", STORES, {"name": "s1", "metadata": {"k": N}}, param="metadata.k"),
    Case("POST", f"{STORES}/default/memories", {"path": "a", "content": "b" + N}),
    Case("POST", f"{STORES}/default/memories", {"path": "a" + N, "content": "b"}),
    Case("POST", "/api/v1/members", {"id": "m1", "kind": "human", "name": N}, param="name"),
    Case("POST", "/api/v1/rooms", {"id": "r1", "members": ["a" + N]}, param="members[0]"),
    Case("POST", "/api/v1/keys", {"kind": "service", "scopes": ["admin"], "name": N}),
    Case("POST", "/api/v1/stores/default/speakers", {"name": "a" + N}, param="name"),
]

NUMBER_CASES = [
    Case("GET", f"{MEMORY}?limit=5&limit=6", param="limit"),  # a repeat: one value, please
    Case("GET", f"{STORES}?limit=5&limit=", param=None),
    Case("POST", MEMORY, memory(proofCount=10**21)),
    Case("POST", MEMORY, memory(proofCount=2**31)),
    Case("POST", MEMORY, memory(proofCount=-1)),
    Case("POST", MEMORY, memory(importance=1e308 * 10)),
    Case("PATCH", f"{MEMORY}/mem_0000000000aaaaaaaaaa", {"proofCount": 2**31}),
    Case("POST", SEARCH, search(max_results=10**30), param="max_results"),
    Case("POST", SEARCH, search(tz=-(2**63)), param="tz"),
    Case("GET", f"{MEMORY}?limit={10**40}a"),
    Case("GET", f"{STORES}/default/memories?limit={10**40}", param=None),
]

# Past the calendar's ends once in UTC, or not dates at all.
EDGES = ("0001-01-01T00:00:00+05:00", "9999-12-31T23:00:00-05:00",
         "0001-01-01T04:59:59.999999+05:00", "10000-01-01", "0000-12-31", "2026-02-30",
         "2026-13-01T00:00:00Z")  # fmt: skip
TIME_CASES = [
    *(
        Case("POST", MEMORY, memory(**{name: value}), param=name)
        for name in ("eventDate", "expiresAt", "firstSeenAt", "lastUsedAt")
        for value in EDGES
    ),
    *(
        Case("PATCH", f"{MEMORY}/mem_0000000000aaaaaaaaaa", {name: value}, param=name)
        for name in ("eventDate", "expiresAt")
        for value in EDGES[:4]
    ),
    *(
        Case("POST", SEARCH, search(filters={name: value}), param=f"filters.{name}")
        for name in ("created_after", "created_before", "event_after", "event_before")
        for value in EDGES
    ),
]

DEEP = 1000
NESTING_CASES = [
    Case("POST", MEMORY, b"[" * DEEP + b"]" * DEEP),
    Case("POST", MEMORY, b'{"text": ' + b"[" * DEEP + b"]" * DEEP + b"}"),
    Case("POST", MEMORY, b'{"memories": ' + b"[" * DEEP + b"]" * DEEP + b"}"),
    Case(
        "POST",
        SEARCH,
        b'{"user_id": "default", "query": "x", "filters": '
        + b'{"a": ' * DEEP
        + b"1"
        + b"}" * (DEEP + 1),
    ),
    Case("POST", "/api/v1/members", b"[" * DEEP + b"]" * DEEP),
    Case("POST", STORES, b'{"name": "s", "metadata": ' + b"[" * DEEP + b"]" * DEEP + b"}"),
    Case("POST", MEMORY, b"[" * 100_000),
]


async def snapshot(conn: asyncpg.Connection) -> dict[str, str]:
    out = {}
    for table in TABLES:
        out[table] = await conn.fetchval(
            f"SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM {table} t"
        )
    return out


async def run_cases(client: Client, conn: asyncpg.Connection, cases: list[Case]) -> None:
    # Something for the PATCHes to find.
    await conn.execute(
        "INSERT INTO memories (workspace_id, id, store_id, text, provider_ref, content_sha256, "
        "content_size_bytes) SELECT workspace_id, 'mem_0000000000aaaaaaaaaa', id, 'x', 'r', "
        "'h', 1 FROM stores WHERE name = 'default'"
    )
    before = await snapshot(conn)
    failures = []
    for case in cases:
        kwargs: dict[str, Any] = {"headers": ADMIN}
        if isinstance(case.body, bytes):
            kwargs["data"] = case.body
        elif case.body is not None:
            kwargs["json"] = case.body
        resp = await client.request(case.method, case.path, **kwargs)
        text = await resp.text()
        if resp.status != case.status:
            failures.append(f"{case}: {resp.status} {text[:200]}")
            continue
        body = await resp.json()
        error = body.get("error", {})
        if body.get("type") != "error" or not error.get("message"):
            failures.append(f"{case}: not the error shape: {text[:200]}")
        elif case.param is not None and error.get("param", case.param) != case.param:
            # Seed 003's routes carry no extra fields; elsewhere the param is named.
            failures.append(f"{case}: names param {error.get('param')!r}")
    assert not failures, "\n".join(failures)
    assert await snapshot(conn) == before, "a refused request changed stored data"


async def test_nul_in_any_string_is_a_400_naming_it(
    client: Client, conn: asyncpg.Connection
) -> None:
    await run_cases(client, conn, NUL_CASES)


async def test_numbers_beyond_postgresql_are_a_400(
    client: Client, conn: asyncpg.Connection
) -> None:
    await run_cases(client, conn, NUMBER_CASES)


async def test_timestamps_past_the_calendar_are_a_400(
    client: Client, conn: asyncpg.Connection
) -> None:
    await run_cases(client, conn, TIME_CASES)


async def test_json_nested_too_deep_is_a_400(client: Client, conn: asyncpg.Connection) -> None:
    await run_cases(client, conn, NESTING_CASES)


async def test_a_cursor_with_nul_is_ignored_like_any_malformed_cursor(client: Client) -> None:
    for raw in (b"1:mem_\x00", b"1:\x00", b"99999999999999999999:mem_x", b"-1:mem_a"):
        cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        resp = await client.get(f"{MEMORY}?cursor={cursor}", headers=ADMIN)
        assert resp.status == 200, (raw, await resp.text())
    # Not even base64, NUL in it: malformed, so ignored (SPEC §3.2), not refused.
    resp = await client.get(f"{MEMORY}?cursor=a%00b", headers=ADMIN)
    assert resp.status == 200


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        ("0001-01-01T00:00:00.001Z", "0001-01-01T00:00:00.001Z"),
        ("0001-01-01T05:00:01+05:00", "0001-01-01T00:00:01.000Z"),
        ("9999-12-31T18:00:00-05:00", "9999-12-31T23:00:00.000Z"),
        # The calendar's first and last instants themselves (asyncpg would store them as
        # -infinity and infinity: kept a microsecond inside, invisible in milliseconds).
        ("0001-01-01", "0001-01-01T00:00:00.000Z"),
        ("0001-01-01T05:00:00+05:00", "0001-01-01T00:00:00.000Z"),
        ("9999-12-31T23:59:59.999999Z", "9999-12-31T23:59:59.999Z"),
    ],
)
async def test_times_near_the_edges_are_kept_and_rendered_in_any_zone(
    client: Client, value: str, stored: str
) -> None:
    resp = await client.post(MEMORY, json=memory(text=value, eventDate=value), headers=ADMIN)
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["eventDate"] == stored
    for form, tz in (("memoir", -12), ("archive", 14), (None, 0)):
        body = search(query=value, max_results=5, tz=tz, **({"form": form} if form else {}))
        resp = await client.post(SEARCH, json=body, headers=ADMIN)
        assert resp.status == 200, await resp.text()
    resp = await client.get(MEMORY, headers=ADMIN)
    assert resp.status == 200


async def test_a_non_ascii_key_or_idempotency_key_is_refused_cleanly(client: Client) -> None:
    resp = await client.get(MEMORY, headers={"X-API-Key": "mneme_sk_\u00e9t\u00e9"})
    assert resp.status == 401
    resp = await client.post(
        MEMORY, json=memory(), headers={**ADMIN, "Idempotency-Key": "caf\u00e9"}
    )
    assert resp.status == 400
    assert "caf" not in await resp.text()  # header values are never echoed


async def test_an_unknown_model_header_is_not_echoed(client: Client) -> None:
    resp = await client.post(
        SEARCH, json=search(), headers={**ADMIN, "X-WOS-Model": "tablet-<script>"}
    )
    assert resp.status == 400
    assert "<script>" not in await resp.text()


def test_forms_render_the_calendars_ends_in_utc_when_the_zone_would_pass_them() -> None:
    from datetime import UTC, datetime

    from service.retrieval.render import render_time

    first = datetime(1, 1, 1, 0, 30, tzinfo=UTC)
    last = datetime(9999, 12, 31, 23, 0, tzinfo=UTC)
    assert render_time(first, "archive", 14) == "0001-01-01 14:30 UTC+14:00"
    assert render_time(first, "archive", -12) == "0001-01-01 00:30 UTC+00:00"
    assert render_time(last, "archive", 14) == "9999-12-31 23:00 UTC+00:00"
    assert render_time(last, "memoir", -5) == "Friday, 31 December 9999, 18:00"


async def test_values_that_once_overflowed_are_answered(client: Client) -> None:
    # A default 30 days before a date near the calendar's start.
    resp = await client.get("/api/v1/usage?to=0001-01-05", headers=ADMIN)
    assert resp.status == 200 and (await resp.json())["data"] == []
    # More digits than Python parses into an int: above any limit.
    resp = await client.get(f"{MEMORY}?limit={'9' * 5000}", headers=ADMIN)
    assert resp.status == 200 and (await resp.json())["meta"]["limitCapped"] is True
    resp = await client.get(f"{STORES}?limit={'9' * 5000}", headers=ADMIN)
    assert resp.status == 400


async def test_sync_identities_are_bounded_to_what_their_index_holds(
    client: Client, conn: asyncpg.Connection
) -> None:
    widest = "\U0001f600" * 512  # 2 kB of UTF-8: the most a providerRef may take
    resp = await client.post(
        MEMORY, json=memory(provider="p" * 64, providerRef=widest), headers=ADMIN
    )
    assert resp.status == 201, await resp.text()
    for body, param in (
        (memory(providerRef="r" * 513), "providerRef"),
        (memory(provider="p" * 65, providerRef="r"), "provider"),
    ):
        resp = await client.post(MEMORY, json=body, headers=ADMIN)
        assert resp.status == 400 and (await resp.json())["error"]["param"] == param


@pytest.mark.parametrize("value", ["2026-W28-2", "20260714T1505Z", "2026-07-14T15", "2026-195"])
async def test_iso_forms_that_are_not_timestamps_are_a_400(
    client: Client, conn: asyncpg.Connection, value: str
) -> None:
    """SPEC §8: RFC 3339 strings (a date alone counts as midnight UTC); not every form
    datetime.fromisoformat takes (a week date, the basic format, an hour alone)."""
    before = await conn.fetchval("SELECT count(*) FROM memories")
    resp = await client.post(MEMORY, json=memory(text="x", eventDate=value), headers=ADMIN)
    assert resp.status == 400 and "eventDate" in await resp.text()
    body = {"user_id": "default", "query": "x", "filters": {"created_after": value}}
    resp = await client.post("/api/v1/memory/search", json=body, headers=ADMIN)
    assert resp.status == 400 and "created_after" in await resp.text()
    assert await conn.fetchval("SELECT count(*) FROM memories") == before


async def test_rfc3339_lowercase_t_and_z_are_timestamps(client: Client) -> None:
    value = "2026-07-14t15:05:00.5z"
    resp = await client.post(MEMORY, json=memory(text="x", eventDate=value), headers=ADMIN)
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["eventDate"] == "2026-07-14T15:05:00.500Z"
