"""Helpers shared by the tests: keys, headers, small request wrappers."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
from aiohttp import web
from aiohttp.test_utils import TestClient
from mcp import Client as McpClient, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mneme_client import Mneme

from bench.common import Server
from embeddings.model import SentenceTransformerEmbedder
from embeddings.worker import Worker
from service.ops import db
from service.queries import keys, tenancy
from service.settings import Settings

BOOTSTRAP_KEY = "test-bootstrap-key-0123456789"
Client = TestClient[web.Request, web.Application]


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


ADMIN = auth(BOOTSTRAP_KEY)


async def make_key(client: Client, **body: Any) -> str:
    resp = await client.post("/api/v1/keys", json=body, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    key: str = (await resp.json())["key"]
    return key


async def make_member(client: Client, member_id: str, kind: str = "human") -> None:
    resp = await client.post("/api/v1/members", json={"id": member_id, "kind": kind}, headers=ADMIN)
    assert resp.status == 201, await resp.text()


async def wait_for(condition: Callable[[], Awaitable[Any]], within_s: float, what: str) -> float:
    """Poll ``condition`` until it is true; the seconds that took. Fails past ``within_s``."""
    started = time.monotonic()
    while not await condition():
        if time.monotonic() - started > within_s:
            raise AssertionError(f"{what}: not within {within_s} s")
        await asyncio.sleep(0.1)
    return time.monotonic() - started


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


# --- search -------------------------------------------------------------------------------

URL = "/api/v1/memory/search"
PNG = "iVBORw0KGgoAAAAAAAAAAAAAAAAAAAA="


@contextlib.contextmanager
def serving(tmp: Path) -> Iterator[Server]:
    """``mneme serve`` with its worker on a data dir in ``tmp``, the bootstrap key
    ``BOOTSTRAP_KEY``, logging to ``tmp/serve.log``: for the clients tested against a
    running server."""
    srv = Server(tmp / "data", BOOTSTRAP_KEY, log=tmp / "serve.log", MNEME_WORKER="on")
    try:
        asyncio.run(srv.ready())
        yield srv
    finally:
        srv.stop()


def new_store(base_url: str, prefix: str) -> str:
    """A store of its own for one test, by the bootstrap key: its name."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with Mneme(api_key=BOOTSTRAP_KEY, base_url=base_url) as admin:
        admin.stores.create(name)
    return name


async def search(
    client: Client,
    body: dict[str, Any],
    *,
    model: str | None = None,
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``POST /api/v1/memory/search`` with ``body`` (the admin key unless ``headers`` says
    otherwise); its JSON, once the status is ``status``."""
    h = {**ADMIN, **(headers or {})}
    if model is not None:
        h["X-WOS-Model"] = model
    resp = await client.post(URL, json=body, headers=h)
    assert resp.status == status, await resp.text()
    out: dict[str, Any] = await resp.json()
    return out


async def write(
    client: Client, *items: dict[str, Any], headers: dict[str, str] = ADMIN
) -> list[str]:
    """Write items one request each (so each has its own created_at); their ids."""
    ids = []
    for item in items:
        resp = await client.post("/api/v1/memories", json=item, headers=headers)
        assert resp.status == 201, await resp.text()
        ids.append((await resp.json())["id"])
    return ids


async def seed(
    client: Client, db_url: str, embedder: SentenceTransformerEmbedder, items: list[dict[str, Any]]
) -> list[str]:
    """Write ``items`` through the API, then embed them all: their ids."""
    ids = await write(client, *items)
    pool = await db.create_pool(db_url, Settings(database_url=db_url, pool_min=1, pool_max=2))
    try:
        await Worker(pool, embedder).drain()
    finally:
        await pool.close()
    return ids


# --- MCP: the official SDK's clients, over stdio (mneme-mcp) or HTTP (/mcp) ------------

TOOLS = {"remember", "recall", "browse", "forget", "list_files", "read_file", "write_file"}
SCRIPT = Path(sys.executable).parent / "mneme-mcp"


def _params(base_url: str, key: str, store: str = "default") -> StdioServerParameters:
    return StdioServerParameters(
        command=str(SCRIPT),
        env={"MNEME_URL": base_url, "MNEME_API_KEY": key, "MNEME_STORE": store},
    )


@contextlib.asynccontextmanager
async def connected(
    service: Client | str,
    key: str = BOOTSTRAP_KEY,
    transport: str = "stdio",
    store: str = "default",
) -> AsyncIterator[McpClient]:
    """An MCP session for ``key`` with ``service`` (a test client, or a base URL), over
    ``transport``, entered and left in the test's own task (anyio's cancel scopes do not
    cross the tasks of a fixture's set-up and teardown)."""
    base = (service if isinstance(service, str) else str(service.make_url(""))).rstrip("/")
    if transport == "stdio":
        async with McpClient(_params(base, key, store)) as mcp:
            yield mcp
        return
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http:
        url = f"{base}/mcp?store={store}"
        async with McpClient(streamable_http_client(url, http_client=http)) as mcp:
            yield mcp


async def call(mcp: McpClient, tool: str, **arguments: Any) -> Any:
    """The tool's structured answer; fails the test on a tool error."""
    result = await mcp.call_tool(tool, arguments)
    assert not result.is_error, result.content
    structured = result.structured_content
    return (
        structured["result"]
        if isinstance(structured, dict) and "result" in structured
        else structured
    )


async def refused(mcp: McpClient, tool: str, **arguments: Any) -> str:
    """The text of the tool error the call must end in."""
    result = await mcp.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    text: str = result.content[0].text  # type: ignore[union-attr]
    return text


async def free_workspace_key(database_url: str, name: str) -> str:
    """A service key (every scope) of a new workspace named ``name`` on the ``free`` plan
    (60 requests a minute): for a real 429."""
    conn = await asyncpg.connect(database_url)
    try:
        ws = await tenancy.create_workspace(conn, name, "free")
        assert ws is not None
        _, secret = await keys.create_key(
            conn, ws.id, kind="service", member=None, scopes=list(keys.SCOPES), name=name
        )
        return secret
    finally:
        await conn.close()
