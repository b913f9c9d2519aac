"""The official TypeScript MCP SDK's client with its OAuth provider, from Node, given only
Mneme's /mcp URL (issue 46): discovery, registration, the consent page, the code's
exchange, remember, a refresh after the access token expired, recall
(tests/mcp_ts/oauth.mjs)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from service.settings import Settings
from tests.helpers import ADMIN, Client, make_key
from tests.test_mcp_http import node_client, run_node  # noqa: F401 - a fixture

pytestmark = pytest.mark.slow


async def test_the_typescript_sdk_completes_the_oauth_flow_and_refreshes(
    make_client: Callable[[Settings], Awaitable[Client]],
    settings: Settings,
    node_client: Path,  # noqa: F811 - the fixture imported above
) -> None:
    client = await make_client(settings.with_overrides(oauth_access_ttl_s=5.0))
    key = await make_key(client, kind="service", scopes=["memory:read", "memory:write"])
    script = node_client.parent / "oauth.mjs"
    out = await run_node(script, str(client.make_url("/mcp")), key, "6000")
    assert out["remembered"]["id"].startswith("mem_")
    assert out["recalled"][0]["id"] == out["remembered"]["id"]
    first, second = out["tokens"]  # the code's tokens, then the refresh's
    assert first["access_token"].startswith("mneme_at_")
    assert second["refresh_token"] != first["refresh_token"]
    grants = await (await client.get("/api/v1/oauth/grants", headers=ADMIN)).json()
    assert [g["client_name"] for g in grants["data"]] == ["mneme-ts-oauth-check"]
