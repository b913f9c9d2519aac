"""What happens before the app sees a request: unparseable requests, slow and vanishing
clients, and the headers every response carries (service/http/server.py).

Raw sockets against the test server, which is built like ``mneme serve`` builds its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from service.settings import Settings
from tests.helpers import ADMIN, BOOTSTRAP_KEY, Client

SECRET = "mneme_sk_do-not-echo-me"


async def exchange(client: Client, data: bytes, *, read_s: float = 5.0) -> bytes:
    """Send raw bytes; everything the server answers until it closes (or ``read_s``)."""
    reader, writer = await asyncio.open_connection(client.server.host, client.server.port)
    writer.write(data)
    await writer.drain()
    out = b""
    try:
        async with asyncio.timeout(read_s):
            while chunk := await reader.read(65536):
                out += chunk
    except TimeoutError:
        pass
    writer.close()
    return out


def parse(response: bytes) -> tuple[int, dict[str, str], dict[str, Any]]:
    head, _, body = response.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers, json.loads(body)


def post_head(path: str, *headers: str) -> str:
    """A JSON POST's request line and headers, with the admin key: then ``headers``."""
    lines = [f"POST {path} HTTP/1.1", "Host: x", f"Authorization: Bearer {BOOTSTRAP_KEY}",
             "Content-Type: application/json", *headers]  # fmt: skip
    return "\n".join(lines) + "\n"


def request(head: str, body: bytes = b"") -> bytes:
    return head.replace("\n", "\r\n").encode() + b"\r\n" + body


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        # A header over aiohttp's 8190-byte limit, with a bearer secret in it.
        (
            request(
                f"GET /api/v1/memories HTTP/1.1\nHost: x\nAuthorization: Bearer {SECRET}"
                + "A" * 9000
                + "\n"
            ),
            431,
        ),
        (request("GET /api/v1/memories?q=" + "a" * 9000 + " HTTP/1.1\nHost: x\n"), 431),
        (request("GET / HTTP/1.1\nHost: x\n" + "".join(f"X-{i}: v\n" for i in range(200))), 431),
        (request(f"GET / HTTP/1.1\nHost: x\nAuthorization: Bearer {SECRET}\x01\n"), 400),
        (request(f"GET /\x01{SECRET} HTTP/1.1\nHost: x\n"), 400),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + SECRET.encode() + b"\r\n\r\n", 400),
    ],
)
async def test_an_unparseable_request_gets_the_json_error_and_echoes_nothing(
    client: Client, caplog: pytest.LogCaptureFixture, raw: bytes, status: int
) -> None:
    caplog.set_level(logging.DEBUG)
    answer = await exchange(client, raw)
    got, headers, body = parse(answer)
    assert got == status
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert headers["content-type"].startswith("application/json")
    assert headers["server"] == "mneme"
    assert headers["request-id"].startswith("req_")
    assert SECRET not in answer.decode("latin-1") and "AAAA" not in answer.decode("latin-1")
    assert not any(SECRET in r.getMessage() or r.exc_info for r in caplog.records)
    assert not any(SECRET in str(r.__dict__) for r in caplog.records)
    # ...and the service goes on serving.
    resp = await client.get("/api/v1/members", headers=ADMIN)
    assert resp.status == 200


@pytest.fixture
async def impatient(
    make_client: Callable[[Settings], Awaitable[Client]], settings: Settings
) -> Client:
    return await make_client(settings.with_overrides(header_timeout=1.0, body_timeout=1.0))


async def test_headers_that_never_finish_get_the_connection_closed(impatient: Client) -> None:
    started = asyncio.get_running_loop().time()
    answer = await exchange(impatient, b"GET /api/v1/members HTTP/1.1\r\nHost: x\r\nX-Sl", read_s=8)
    assert answer == b""  # closed without a word
    assert asyncio.get_running_loop().time() - started < 5


async def test_a_body_that_stops_arriving_is_a_408(impatient: Client) -> None:
    head = post_head("/api/v1/memories", "Content-Length: 100")
    answer = await exchange(impatient, request(head, b'{"text": "'), read_s=8)
    status, _, body = parse(answer)
    assert status == 408
    assert body["error"]["type"] == "invalid_request_error"
    resp = await impatient.get("/api/v1/memories", headers=ADMIN)
    assert (await resp.json())["data"] == []


async def test_a_client_gone_mid_body_is_no_server_error(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    head = post_head("/api/v1/memories", "Content-Length: 1000")
    _, writer = await asyncio.open_connection(client.server.host, client.server.port)
    writer.write(request(head, b'{"text": "cut'))
    await writer.drain()
    await asyncio.sleep(0.2)
    writer.close()
    for _ in range(50):
        access = [r for r in caplog.records if r.name == "mneme.access"]
        if access:
            break
        await asyncio.sleep(0.05)
    assert [getattr(r, "status", None) for r in access] == [400]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.parametrize("path", ["/nowhere", "/healthz", "/api/v1/memories"])
async def test_an_unknown_expectation_is_ignored_not_refused_in_bare_text(
    client: Client, path: str
) -> None:
    # aiohttp answered 417 "Unknown Expect: <the header>" in plain text, before routing.
    head = f"GET {path} HTTP/1.1\nHost: x\nAuthorization: Bearer {BOOTSTRAP_KEY}\n"
    status, headers, body = parse(await exchange(client, request(head + "Expect: x-<b>\n")))
    assert status in (200, 404) and "request-id" in headers, (status, body)
    assert "<b>" not in json.dumps(body)
    # 100-continue is still answered so, and the request goes on.
    head = post_head("/api/v1/memories", "Content-Length: 15", "Expect: 100-continue")
    answer = await exchange(client, request(head, b'{"text": "cup"}'))
    assert answer.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert parse(answer.split(b"\r\n\r\n", 1)[1])[0] == 201


async def test_a_body_declared_too_large_is_refused_at_once(client: Client) -> None:
    # Only the head is sent: the 413 comes from what the body declares, not after
    # waiting (a declared 100 GB held the connection for its deadline: 11 days).
    head = post_head("/api/v1/memories", "Content-Length: 99999999999")
    status, _, body = parse(await exchange(client, request(head, b"{}"), read_s=3))
    assert (status, body["error"]["type"]) == (413, "request_too_large")


async def test_a_body_its_content_encoding_cannot_decode_is_a_400_said_so(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    head = post_head("/api/v1/memories", "Content-Encoding: gzip", "Content-Length: 7")
    status, _, body = parse(await exchange(client, request(head, b"garbage"), read_s=2))
    assert status == 400 and "Content-Encoding" in body["error"]["message"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


async def test_a_search_answered_before_its_body_arrives_leaves_nothing_reading(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    # A key that checked out gets its search body read while the key is checked (the
    # prefetch). An answer that needs no body (an unknown model is a 400 before it) must
    # stop that read, or aiohttp's own draining of the unread body collides with it.
    caplog.set_level(logging.INFO)
    resp = await client.post(
        "/api/v1/memory/search", json={"user_id": "default", "query": "hi"}, headers=ADMIN
    )
    assert resp.status == 200
    head = post_head("/api/v1/memory/search", "X-WOS-Model: Quill 9", "Content-Length: 60")
    reader, writer = await asyncio.open_connection(client.server.host, client.server.port)
    writer.write(request(head, b'{"user_id": "default", "query": "pa'))
    await writer.drain()
    status, _, body = parse(await asyncio.wait_for(reader.read(65536), 5))
    assert status == 400 and "Unknown memory model" in body["error"]["message"]
    writer.write(b'rtly sent body, the rest"}' + b" " * 20)  # the rest, after the answer
    await writer.drain()
    await asyncio.sleep(0.2)
    writer.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


async def test_every_response_names_the_server_without_versions_and_says_nosniff(
    client: Client,
) -> None:
    png = "iVBORw0KGgoAAAAAAAAAAAAAAAAAAAA="
    resp = await client.post(
        "/api/v1/memories",
        json={"text": "a lake", "image": {"data": png, "mimeType": "image/png"}},
        headers=ADMIN,
    )
    media = f"/api/v1/memories/{(await resp.json())['id']}/media"
    for method, path in (("GET", media), ("GET", "/healthz"), ("GET", "/nowhere"),
                         ("DELETE", "/healthz"), ("GET", "/api/v1/members")):  # fmt: skip
        resp = await client.request(method, path, headers=ADMIN)
        assert resp.headers["Server"] == "mneme", path
        assert resp.headers["X-Content-Type-Options"] == "nosniff", path
