"""Every error, of every kind, leaves in one shape with a request id."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest
from aiohttp import ClientResponse, web

from embeddings.model import SentenceTransformerEmbedder
from service.app import create_app
from service.settings import Settings
from tests.helpers import ADMIN, BOOTSTRAP_KEY, Client, auth, make_key


async def assert_error(resp: ClientResponse, status: int, kind: str) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/json"
    assert resp.headers["request-id"].startswith("req_")
    body: dict[str, Any] = await resp.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == kind
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body


async def test_malformed_json_is_a_400(client: Client) -> None:
    resp = await client.post("/api/v1/members", data=b"{not json", headers=ADMIN)
    body = await assert_error(resp, 400, "invalid_request_error")
    assert "JSON" in body["error"]["message"]


async def test_wrong_field_type_is_a_400_naming_the_field(client: Client) -> None:
    resp = await client.post("/api/v1/members", json={"id": 5, "kind": "human"}, headers=ADMIN)
    body = await assert_error(resp, 400, "invalid_request_error")
    assert "$.id" in body["error"]["message"]


async def test_missing_key_is_a_401(client: Client) -> None:
    await assert_error(await client.get("/api/v1/members"), 401, "authentication_error")


async def test_unknown_key_is_a_401(client: Client) -> None:
    resp = await client.get("/api/v1/members", headers=auth("mneme_sk_not-a-real-key"))
    await assert_error(resp, 401, "authentication_error")


async def test_non_bearer_authorization_is_a_401(client: Client) -> None:
    resp = await client.get("/api/v1/members", headers={"Authorization": "Basic abc"})
    body = await assert_error(resp, 401, "authentication_error")
    assert "Bearer" in body["error"]["message"]


@pytest.mark.parametrize("authorization", ["Basic abc", "", "Bearer "])
async def test_x_api_key_counts_beside_another_authorization(
    client: Client, authorization: str
) -> None:
    """A proxy's own Authorization (Basic credentials, or an empty one) beside the key in
    X-API-Key: both headers are accepted everywhere (SPEC §1), so the key is used."""
    headers = {"Authorization": authorization, "X-API-Key": BOOTSTRAP_KEY}
    assert (await client.get("/api/v1/members", headers=headers)).status == 200
    bad = {"Authorization": "Bearer mneme_sk_not-a-real-key", "X-API-Key": BOOTSTRAP_KEY}
    resp = await client.get("/api/v1/members", headers=bad)  # a Bearer key is the one used
    await assert_error(resp, 401, "authentication_error")


async def test_missing_scope_is_a_403(client: Client) -> None:
    key = await make_key(client, kind="service", scopes=["memory:read"])
    body = await assert_error(
        await client.get("/api/v1/members", headers=auth(key)), 403, "permission_error"
    )
    assert "admin" in body["error"]["message"]


async def test_unknown_route_is_a_404(client: Client) -> None:
    await assert_error(await client.get("/api/v1/nothing-here"), 404, "not_found_error")


async def test_unknown_room_is_a_404(client: Client) -> None:
    resp = await client.put("/api/v1/rooms/nope/members/alice", headers=ADMIN)
    await assert_error(resp, 404, "not_found_error")


async def test_wrong_method_is_a_405_invalid_request(client: Client) -> None:
    resp = await client.patch("/api/v1/members", headers=ADMIN)
    await assert_error(resp, 405, "invalid_request_error")
    assert set(resp.headers["Allow"].split(",")) == {"GET", "HEAD", "POST"}


async def test_head_answers_every_get_route_without_a_body(client: Client) -> None:
    # curl -I, load balancers' probes: a GET's status and headers, no body.
    for path, headers, status in (
        ("/healthz", {}, 200), ("/api/v1/memories", ADMIN, 200), ("/api/v1/memories", {}, 401),
        ("/api/v1/memories/mem_0000000000000000", ADMIN, 404),
    ):  # fmt: skip
        resp = await client.head(path, headers=headers)
        assert (resp.status, await resp.read()) == (status, b""), path
        assert "request-id" in resp.headers


async def test_duplicate_is_a_409(client: Client) -> None:
    body = {"id": "alice", "kind": "human"}
    assert (await client.post("/api/v1/members", json=body, headers=ADMIN)).status == 201
    resp = await client.post("/api/v1/members", json=body, headers=ADMIN)
    await assert_error(resp, 409, "conflict_error")


async def test_body_over_16_mib_is_a_413(client: Client) -> None:
    big = b'{"id": "' + b"a" * (16 * 1024 * 1024) + b'", "kind": "human"}'
    resp = await client.post(
        "/api/v1/members", data=big, headers={**ADMIN, "Content-Type": "application/json"}
    )
    await assert_error(resp, 413, "request_too_large")


async def test_rate_limit_is_a_429_with_retry_after(
    make_client: Callable[[Settings], Awaitable[Client]], settings: Settings
) -> None:
    client = await make_client(
        settings.with_overrides(rate_limits={"free": 1, "pro": 1, "scale": 1})
    )
    assert (await client.get("/api/v1/members", headers=ADMIN)).status == 200
    resp = await client.get("/api/v1/members", headers=ADMIN)
    body = await assert_error(resp, 429, "rate_limit_error")
    assert int(resp.headers["Retry-After"]) >= 1
    assert body["error"]["retry_after"] == int(resp.headers["Retry-After"])


async def test_unexpected_exception_is_a_500_without_its_text(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]],
    settings: Settings,
    embedder: SentenceTransformerEmbedder,
) -> None:
    async def explode(request: web.Request) -> web.Response:
        raise RuntimeError("secret internal detail")

    app = create_app(settings, embedder=embedder, announce_key=lambda _: None)
    app.router.add_get("/boom", explode)
    client = await aiohttp_client(app)
    resp = await client.get("/boom")
    body = await assert_error(resp, 500, "api_error")
    assert "secret" not in await resp.text()
    assert resp.headers["request-id"] in body["error"]["message"]


async def test_successful_responses_carry_a_request_id_too(client: Client) -> None:
    first = await client.get("/healthz")
    second = await client.get("/healthz")
    assert first.status == 200
    assert first.headers["request-id"] != second.headers["request-id"]


async def test_readyz_reports_an_unmigrated_database_as_unavailable(
    client: Client, conn: asyncpg.Connection
) -> None:
    ok = await client.get("/readyz")
    assert ok.status == 200
    body = await ok.json()
    assert body == {
        "status": "ok",
        "database": "ok",
        "migrations": "ok",
        "model": "ready",
        "embeddingQueue": 0,
    }
    await conn.execute("DELETE FROM schema_migrations WHERE version = 1")
    resp = await client.get("/readyz")
    assert resp.status == 503
    body = await resp.json()
    assert body["status"] == "unavailable"
    assert "mneme migrate" in body["migrations"]


async def test_metrics_expose_per_route_latency_and_pool_use(client: Client) -> None:
    await client.get("/api/v1/members", headers=ADMIN)
    await client.get("/api/v1/rooms/nope/members", headers=ADMIN)
    text = await (await client.get("/metrics")).text()
    assert (
        'mneme_http_request_duration_seconds_count{method="GET",route="/api/v1/members"} 1.0'
        in text
    )
    assert 'mneme_http_requests_total{method="GET",route="/api/v1/members",status="200"}' in text
    assert 'route="unmatched",status="404"' in text
    assert 'mneme_db_pool_connections{state="max"} 4.0' in text
    assert "mneme_embedding_queue_depth 0.0" in text
