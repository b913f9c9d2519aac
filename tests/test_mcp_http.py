"""What only the service's own ``/mcp`` (Streamable HTTP) has: the caller's key at the
door, readability across two keys, the URL's store, bad input, origins, operations, two
replicas, and the official TypeScript SDK's client. The tools' behaviour over both
transports is tests/test_mcp.py's."""

from __future__ import annotations

import itertools
import json
import logging
import shutil
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from service.settings import Settings, parse_origins
from tests.helpers import (
    ADMIN,
    BOOTSTRAP_KEY,
    TOOLS,
    Client as HttpClient,
    auth,
    call,
    connected,
    free_workspace_key,
    make_key,
    make_member,
    refused,
    repo_root,
)

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
STREAMABLE = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def post_mcp(client: HttpClient, body: Any, **headers: str) -> aiohttp.ClientResponse:
    raw = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return await client.post("/mcp", data=raw, headers={**STREAMABLE, **headers})


async def test_no_key_or_a_bad_key_is_401_before_any_mcp_message(client: HttpClient) -> None:
    for headers in ({}, {"Authorization": "Bearer not-a-key-at-all-xxxxxxxx"}, {"X-API-Key": "x"}):
        resp = await post_mcp(client, INITIALIZE, **headers)
        assert resp.status == 401, await resp.text()
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")
        body = await resp.json()
        assert body["type"] == "error" and body["error"]["type"] == "authentication_error"
    ok = await post_mcp(client, INITIALIZE, **ADMIN)
    assert ok.status == 200, await ok.text()
    assert (await ok.json())["result"]["serverInfo"]["name"] == "mneme"


async def test_the_tools_carry_their_annotations(client: HttpClient) -> None:
    async with connected(client, transport="http") as agent:
        listed = {t.name: t for t in (await agent.list_tools()).tools}
    assert set(listed) == TOOLS
    hints = {}
    for name, tool in listed.items():
        assert tool.annotations is not None, name
        hints[name] = tool.annotations
    for name in ("recall", "browse", "list_files", "read_file"):
        assert hints[name].read_only_hint is True, name
    assert hints["forget"].destructive_hint is True and hints["forget"].idempotent_hint is True
    assert hints["remember"].read_only_hint is False and hints["remember"].idempotent_hint is False


async def _two_members_and_a_room(client: HttpClient) -> dict[str, str]:
    """alice and bob (humans), bot (agent), a room ops with bob only; one memory in each
    scope: the ids by scope."""
    for member, kind in (("alice", "human"), ("bob", "human"), ("bot", "agent")):
        await make_member(client, member, kind)
    resp = await client.post("/api/v1/rooms", json={"id": "ops", "members": ["bob"]}, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    texts = {
        "workspace": "The espresso machine is descaled on Fridays.",
        "pair:alice:bot": "Alice's espresso order is a double ristretto.",
        "pair:bob:bot": "Bob's espresso order is a lungo with sugar.",
        "room:ops": "Ops keeps the espresso budget in the shared sheet.",
    }
    ids = {}
    for scope, text in texts.items():
        resp = await client.post(
            "/api/v1/memories", json={"text": text, "scope": scope}, headers=ADMIN
        )
        assert resp.status == 201, await resp.text()
        ids[scope] = (await resp.json())["id"]
    return ids


async def test_two_keys_recall_and_browse_only_what_each_may_read(client: HttpClient) -> None:
    ids = await _two_members_and_a_room(client)
    alice = await make_key(client, kind="personal", member="alice", scopes=["memory:read"])
    bob = await make_key(client, kind="personal", member="bob", scopes=["memory:read"])
    seen: dict[str, set[str]] = {}
    for name, key in (("alice", alice), ("bob", bob)):
        async with connected(client, key, "http") as agent:
            hits = await call(agent, "recall", query="What is the espresso order?", max_results=20)
            browsed = await call(agent, "browse", search="espresso")
            assert hits, name
            seen[f"{name} recall"] = {h["id"] for h in hits}
            seen[f"{name} browse"] = {m["id"] for m in browsed}
    alice_may = {ids["workspace"], ids["pair:alice:bot"]}
    bob_may = {ids["workspace"], ids["pair:bob:bot"], ids["room:ops"]}
    assert seen["alice browse"] == alice_may and seen["alice recall"] <= alice_may
    assert seen["bob browse"] == bob_may and seen["bob recall"] <= bob_may
    # Nor by id: forget answers as if the memory did not exist (and deletes nothing).
    writer = await make_key(
        client, kind="personal", member="alice", scopes=["memory:read", "memory:write"]
    )
    async with connected(client, writer, "http") as agent:
        assert "404" in await refused(agent, "forget", memory_id=ids["pair:bob:bot"])
    resp = await client.get(f"/api/v1/memories/{ids['pair:bob:bot']}", headers=ADMIN)
    assert (await resp.json())["status"] == "active"


async def test_two_keys_see_only_the_files_each_may_read(client: HttpClient) -> None:
    # The file tools run in-process (faces.stores' path functions): a file kept between
    # alice and the bot is listed and read for alice's key, and for bob's it is not there,
    # by list, by path, or as a write's precondition.
    for member, kind in (("alice", "human"), ("bob", "human"), ("bot", "agent")):
        await make_member(client, member, kind)
    body = {"text": "Alice's doctor is Dr. Okafor.", "path": "notes/alice.md",
            "scope": "pair:alice:bot"}  # fmt: skip
    resp = await client.post("/api/v1/memories", json=body, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    both = ["memory:read", "memory:write"]
    alice = await make_key(client, kind="personal", member="alice", scopes=both)
    bob = await make_key(client, kind="personal", member="bob", scopes=both)
    async with connected(client, alice, "http") as agent:
        assert [f["path"] for f in await call(agent, "list_files", store="default")] == [
            "notes/alice.md"
        ]
        read = await call(agent, "read_file", store="default", path="notes/alice.md")
        assert read["content"] == body["text"]
    async with connected(client, bob, "http") as agent:
        assert await call(agent, "list_files", store="default") == []
        assert "404" in await refused(agent, "read_file", store="default", path="notes/alice.md")
        text = await refused(agent, "write_file", store="default", path="notes/alice.md",
                             content="x", expected_sha256=read["content_sha256"])  # fmt: skip
        assert "Okafor" not in text
    resp = await client.get("/api/v1/memories/" + read["id"], headers=ADMIN)
    assert (await resp.json())["text"] == body["text"]


async def test_remember_keeps_a_memory_private_and_recall_narrows(client: HttpClient) -> None:
    # An agent acting for alice keeps what she said between the two of them: bob's key
    # cannot recall or browse it; filters and speaker narrow recall as in the API.
    for member, kind in (("alice", "human"), ("bob", "human"), ("bot", "agent")):
        await make_member(client, member, kind)
    both = ["memory:read", "memory:write"]
    alice = await make_key(client, kind="personal", member="alice", scopes=both)
    bob = await make_key(client, kind="personal", member="bob", scopes=both)
    async with connected(client, alice, "http") as agent:
        old = await call(agent, "remember", text="Alice's badge number is 4411.",
                         scope="pair:alice:bot")  # fmt: skip
        new = await call(agent, "remember", text="Alice's badge number is 5120 now.",
                         scope="pair:alice:bot", importance=0.9, event_date="2026-03-02",
                         supersedes=old["id"], speaker="me")  # fmt: skip
        assert new["scope"] == "pair:alice:bot" and new["speaker"] == "me"
        current = {"scope": "pair:alice:bot", "include_superseded": False}
        mine = await call(agent, "recall", query="What is Alice's badge number?", filters=current)
        assert [h["id"] for h in mine] == [new["id"]]
        said = await call(agent, "recall", query="badge number", speaker="me")
        assert [h["id"] for h in said] == [new["id"]]
        assert "400" in await refused(agent, "recall", query="badge", filters={"tier": 7})
    stored = await (await client.get(f"/api/v1/memories/{new['id']}", headers=ADMIN)).json()
    assert (stored["importance"], stored["eventDate"][:10]) == (0.9, "2026-03-02")
    async with connected(client, bob, "http") as agent:
        assert await call(agent, "recall", query="What is Alice's badge number?") == []
        assert await call(agent, "browse", search="badge") == []


async def test_a_read_only_key_writes_nothing_through_mcp(client: HttpClient) -> None:
    reader = await make_key(client, kind="service", scopes=["memory:read"])
    async with connected(client, reader, "http") as agent:
        text = await refused(agent, "remember", text="Sneaky write over HTTP.")
        assert "403 permission_error" in text and "memory:write" in text, text
        assert "403" in await refused(
            agent, "write_file", store="default", path="a.md", content="x"
        )
    page = await (await client.get("/api/v1/memories?limit=50", headers=ADMIN)).json()
    assert page["data"] == []


async def test_the_url_names_the_default_store(client: HttpClient) -> None:
    resp = await client.post("/api/v1/forward/memory_stores", json={"name": "alice-notes"},
                             headers=ADMIN)  # fmt: skip
    assert resp.status in (200, 201), await resp.text()
    async with connected(client, transport="http", store="alice-notes") as agent:
        memory = await call(agent, "remember", text="Alice's notes live in their own store.")
        assert [m["id"] for m in await call(agent, "browse")] == [memory["id"]]
    async with connected(client, transport="http") as agent:  # ?store=default
        assert await call(agent, "browse") == []
        assert "404" in await refused(agent, "recall", query="notes", store="nowhere")


async def test_bad_input_is_a_client_error_never_a_500(client: HttpClient) -> None:
    resp = await client.post("/mcp", data=json.dumps(INITIALIZE), headers=ADMIN)  # no types
    assert resp.status in (400, 406, 415), await resp.text()
    assert (await resp.json())["error"]["type"] == "invalid_request_error"
    # JSON that the transport refuses for its Accept header: the error shape too.
    resp = await client.post(
        "/mcp", data=json.dumps(INITIALIZE),
        headers={**ADMIN, "Content-Type": "application/json", "Accept": "text/html"},
    )  # fmt: skip
    body = await resp.json()
    assert resp.status == 406 and body["type"] == "error", body
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("MCP: Not Acceptable")
    resp = await post_mcp(client, b"{not json", **ADMIN)
    assert resp.status == 400, await resp.text()
    error = (await resp.json())["error"]  # the §3 shape, its object JSON-RPC's too
    assert (error["type"], error["code"]) == ("invalid_request_error", -32700)  # parse error
    assert error["message"].startswith("MCP: ")
    resp = await post_mcp(client, {"jsonrpc": "2.0", "id": 2, "method": 7}, **ADMIN)
    assert 400 <= resp.status < 500, await resp.text()
    body = await resp.json()
    assert body["type"] == "error" and len(body["error"]["message"]) <= 305
    # A tool called with arguments of the wrong type: a tool error, nothing written.
    async with connected(client, transport="http") as agent:
        result = await agent.call_tool("remember", {"text": ["not", "a", "string"]})
        assert result.is_error
        result = await agent.call_tool("recall", {"query": "x", "max_results": "many"})
        assert result.is_error
    huge = json.dumps({**INITIALIZE, "padding": "x" * (17 * 1024 * 1024)})
    resp = await post_mcp(client, huge, **ADMIN)
    assert resp.status == 413
    assert (await resp.json())["error"]["type"] == "request_too_large"
    page = await (await client.get("/api/v1/memories?limit=50", headers=ADMIN)).json()
    assert page["data"] == []


async def test_a_tool_call_counts_once_against_the_rate_limit_and_in_usage(
    client: HttpClient, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The free plan allows 60 requests a minute: 40 recalls in one session (and the
    # session's own few requests) all answer. A door that called the REST API over
    # loopback counted each call twice and was refused from the 30th on.
    key = await free_workspace_key(db_url, "agents-on-the-free-plan")
    with caplog.at_level(logging.INFO, logger="mneme.access"):
        async with connected(client, key, "http") as agent:
            await call(agent, "remember", text="The deploy window is Tuesday at 10:00.")
            for i in range(40):
                hits = await call(agent, "recall", query=f"When is the deploy window? ({i})")
                assert hits and "deploy" in hits[0]["content"], hits
    served = [r for r in caplog.records if getattr(r, "path", None) == "/mcp"]
    assert served and all(r.status == 200 for r in served)  # type: ignore[attr-defined]
    assert len(served) < 50  # one request a tool call, a few for the session
    conn = await asyncpg.connect(db_url)
    try:
        counted = await conn.fetchval(
            "SELECT sum(c.count) FROM rate_limit_counters c JOIN workspaces w "
            "ON w.id = c.workspace_id WHERE w.name = $1",
            "agents-on-the-free-plan",
        )
    finally:
        await conn.close()
    assert counted == len(served)  # each request counted once: no request of its own inside
    usage = await (await client.get("/api/v1/usage", headers=auth(key))).json()
    [row] = usage["data"]
    assert (row["endpoint"], row["requests"]) == ("search", 40)


async def test_get_and_delete_have_no_session_in_stateless_mode(client: HttpClient) -> None:
    for method in ("GET", "DELETE"):
        resp = await client.request(method, "/mcp", headers={**STREAMABLE, **ADMIN})
        assert resp.status == 405, (method, await resp.text())
        assert resp.headers["Allow"] == "POST, OPTIONS"
        assert "stateless" in (await resp.json())["error"]["message"]


async def test_a_browser_page_of_another_origin_is_refused(
    make_client: Callable[[Settings], Awaitable[HttpClient]], settings: Settings
) -> None:
    allowed = "https://agent.example.com"  # configured as a person may write it:
    configured = parse_origins("HTTPS://Agent.Example.com:443/")
    client = await make_client(Settings(**{**settings.__dict__, "mcp_allowed_origins": configured}))
    resp = await post_mcp(client, INITIALIZE, Origin="https://evil.example", **ADMIN)
    assert resp.status == 403
    message = (await resp.json())["error"]["message"]
    assert "MNEME_MCP_ALLOWED_ORIGINS" in message and "evil" not in message  # no header echo
    resp = await post_mcp(client, INITIALIZE, Origin=allowed, **ADMIN)
    assert resp.status == 200 and resp.headers["Access-Control-Allow-Origin"] == allowed
    preflight = await client.options(
        "/mcp", headers={"Origin": allowed, "Access-Control-Request-Method": "POST"}
    )
    assert preflight.status == 204
    assert "Authorization" in preflight.headers["Access-Control-Allow-Headers"]
    refused_preflight = await client.options("/mcp", headers={"Origin": "https://evil.example"})
    assert refused_preflight.status == 403


async def test_the_services_own_origin_may_call_but_a_rebound_name_may_not(
    make_client: Callable[[Settings], Awaitable[HttpClient]], settings: Settings
) -> None:
    # A page of the service's own origin on a loopback host is same-origin; a DNS
    # rebinding attack sends its own name as Host and Origin alike, and stays refused.
    client = await make_client(settings)
    own = str(client.make_url("")).rstrip("/")
    assert (await post_mcp(client, INITIALIZE, Origin=own, **ADMIN)).status == 200
    rebound = {"Origin": "http://evil.example:8080", "Host": "evil.example:8080"}
    assert (await post_mcp(client, INITIALIZE, **rebound, **ADMIN)).status == 403
    public = await make_client(settings.with_overrides(public_url="https://mneme.example.com"))
    ok = await post_mcp(public, INITIALIZE, Origin="https://mneme.example.com", **ADMIN)
    assert ok.status == 200
    assert (await post_mcp(public, INITIALIZE, Origin=own, **ADMIN)).status == 403


async def test_mcp_calls_show_in_metrics_logs_and_the_api_description(
    client: HttpClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="mneme.access"):
        resp = await post_mcp(client, INITIALIZE, **ADMIN)
    assert resp.status == 200
    request_id = resp.headers["request-id"]
    logged = [r for r in caplog.records if getattr(r, "request_id", None) == request_id]
    assert logged and logged[0].path == "/mcp" and logged[0].status == 200  # type: ignore[attr-defined]
    metrics = await (await client.get("/metrics")).text()
    assert 'route="/mcp"' in metrics and 'method="POST"' in metrics
    spec = await (await client.get("/openapi.json")).json()
    assert {"post", "get", "delete"} <= set(spec["paths"]["/mcp"])
    llms = await (await client.get("/llms.txt")).text()
    assert "/mcp" in llms and "Bearer" in llms


class RoundRobin:
    """A proxy that sends each request to the next upstream in turn: no stickiness."""

    def __init__(self, upstreams: list[str]) -> None:
        self.next = itertools.cycle(upstreams)
        self.served: list[str] = []

    async def forward(self, request: web.Request) -> web.Response:
        upstream = next(self.next)
        self.served.append(upstream)
        headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                request.method,
                upstream + request.path_qs,
                data=await request.read(),
                headers=headers,
            ) as resp,
        ):
            body = await resp.read()
            hop = ("content-length", "transfer-encoding", "content-encoding")
            out = {k: v for k, v in resp.headers.items() if k.lower() not in hop}
            return web.Response(status=resp.status, body=body, headers=out)


@pytest.mark.slow
async def test_two_replicas_without_sticky_routing_serve_one_session(
    client: HttpClient,
    make_client: Callable[[Settings], Awaitable[HttpClient]],
    settings: Settings,
) -> None:
    second = await make_client(settings)  # another replica on the same database
    upstreams = [str(c.make_url("")).rstrip("/") for c in (client, second)]
    proxy = RoundRobin(upstreams)
    front = web.Application()
    front.router.add_route("*", "/{tail:.*}", proxy.forward)
    server = TestServer(front)
    await server.start_server()
    try:
        async with connected(str(server.make_url("")), transport="http") as a:
            memory = await call(a, "remember", text="Replicas share one bank of memories.")
            hits = await call(a, "recall", query="Do the replicas share memories?")
            assert hits[0]["id"] == memory["id"]
            assert await call(a, "forget", memory_id=memory["id"]) == f"forgot {memory['id']}"
            assert await call(a, "browse", search="replicas") == []
    finally:
        await server.close()
    assert set(proxy.served) == set(upstreams) and len(proxy.served) >= 6


NODE_CLIENT = repo_root() / "tests" / "mcp_ts"


@pytest.fixture(scope="session")
def node_client() -> Path:
    """The TypeScript SDK's client, installed from the committed lock file."""
    if shutil.which("npm") is None:
        pytest.fail("npm is needed for the TypeScript MCP client test (Node 18+)")
    if not (NODE_CLIENT / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=NODE_CLIENT, check=True,
                       timeout=600)  # fmt: skip
    return NODE_CLIENT / "client.mjs"


@pytest.mark.slow
async def test_the_typescript_sdk_remembers_and_recalls(
    client: HttpClient, node_client: Path
) -> None:
    url = str(client.make_url("/mcp?store=default"))
    proc = await run_node(node_client, url, BOOTSTRAP_KEY)
    assert proc["tools"] == sorted(TOOLS)
    assert proc["remembered"]["id"].startswith("mem_")
    assert proc["recalled"][0]["id"] == proc["remembered"]["id"]
    page = await (await client.get("/api/v1/memories?limit=5", headers=ADMIN)).json()
    assert [m["id"] for m in page["data"]] == [proc["remembered"]["id"]]
    bad = await run_node(node_client, url, "not-a-key-xxxxxxxxxxxxxxxx", check=False)
    assert "authentication_error" in bad["error"], bad


async def run_node(script: Path, *args: str, check: bool = True) -> dict[str, Any]:
    """The last JSON line a Node script printed, given ``args``."""
    import asyncio

    proc = await asyncio.create_subprocess_exec(
        "node", str(script), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    if check:
        assert proc.returncode == 0, err.decode()
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result
