"""The MCP conformance suite (``@modelcontextprotocol/conformance``, npm) against /mcp.

Its server scenarios connect as an unauthenticated client, so they reach /mcp through a
small proxy that adds an OAuth access token this test obtained with the full flow (the
consent page included): what they check is the MCP server behind the token. The
scenarios that need the reference "everything" server's own test tools, resources and
prompts (``tools-call-image``, ``prompts-get-simple``, …), or capabilities Mneme does not
offer (logging, completions, sampling, elicitation, subscriptions), are listed in
tests/conformance/baseline.yml as expected failures, each with why; the suite fails on
any other failure and on a baseline entry that has started to pass.

The suite's auth scenarios test clients, not servers (``conformance list``); Mneme's
side of OAuth is tests/test_oauth.py's, with the official SDKs' clients.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.helpers import Client, make_key, repo_root
from tests.oauth_flow import HandClient

pytestmark = pytest.mark.slow

# What aiohttp sets itself on the way back (the body is forwarded whole and decoded).
HOP = ("content-length", "transfer-encoding", "content-encoding")
SUITE = repo_root() / "tests" / "conformance"
CLI = SUITE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"


@pytest.fixture(scope="session")
def conformance_cli() -> Path:
    if shutil.which("npm") is None:
        pytest.fail("npm is needed for the MCP conformance suite (Node 20+)")
    if not CLI.is_file():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=SUITE, check=True,
                       timeout=600)  # fmt: skip
    return CLI


async def token_proxy(upstream: str, token: str) -> AsyncIterator[str]:
    """A server forwarding /mcp to ``upstream`` with ``token`` added; yields its URL."""
    http = aiohttp.ClientSession()

    async def forward(request: web.Request) -> web.Response:
        # Host as sent (the DNS rebinding scenario checks Host against Origin).
        headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
        headers["Authorization"] = f"Bearer {token}"
        async with http.request(request.method, upstream, headers=headers,
                                data=await request.read()) as resp:  # fmt: skip
            body = await resp.read()
            kept = {k: v for k, v in resp.headers.items() if k.lower() not in HOP}
            return web.Response(status=resp.status, body=body, headers=kept)

    app = web.Application()
    app.router.add_route("*", "/mcp", forward)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        await runner.cleanup()
        await http.close()


async def test_the_conformance_server_scenarios_pass_or_are_known(
    client: Client, conformance_cli: Path, tmp_path: Path
) -> None:
    base = str(client.make_url("")).rstrip("/")
    key = await make_key(client, kind="service", scopes=["memory:read", "memory:write"])
    tokens = await (await HandClient.register(base)).tokens(key)
    async for url in token_proxy(f"{base}/mcp", tokens["access_token"]):
        proc = await asyncio.create_subprocess_exec(
            "node", str(conformance_cli), "server", "--url", url,
            "--expected-failures", str(SUITE / "baseline.yml"), "-o", str(tmp_path),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=600)
        report = out.decode()
        (tmp_path / "summary.txt").write_text(report)
        assert proc.returncode == 0, report[-6000:]
