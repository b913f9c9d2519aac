"""OAuth 2.1 for /mcp (issue 46): discovery, the official Python SDK's OAuth client end to
end, and the hostile cases, each refused. The person's part (the consent page) is played
over HTTP by tests/oauth_flow.py; the TypeScript SDK's flow is test_oauth_typescript.py's."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import asyncpg
from mcp import Client as McpClient
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from service.app_keys import POOL
from service.http.public import issuer_warning
from service.ops import jobs
from service.queries import oauth
from service.settings import Settings
from tests.helpers import ADMIN, Client, call, make_key, make_member, refused, wait_for
from tests.oauth_flow import REDIRECT, Answer, HandClient, consent, hidden, pkce
from tests.test_cli_and_bootstrap import mneme
from tests.test_mcp_http import INITIALIZE, STREAMABLE

BOTH = ["memory:read", "memory:write"]


def base_of(client: Client) -> str:
    return str(client.make_url("")).rstrip("/")


class MemoryStorage:
    """The SDK's ``TokenStorage``, in memory; keeps every token set it was given."""

    def __init__(self) -> None:
        self.issued: list[OAuthToken] = []
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.issued[-1] if self.issued else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.issued.append(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


async def post_mcp(client: Client, token: str | None) -> aiohttp.ClientResponse:
    headers = dict(STREAMABLE)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return await client.post("/mcp", data=json.dumps(INITIALIZE), headers=headers)


# --- discovery ----------------------------------------------------------------------------


async def test_a_401_from_mcp_says_where_to_get_a_token(client: Client) -> None:
    base = base_of(client)
    metadata = f'resource_metadata="{base}/.well-known/oauth-protected-resource"'
    resp = await post_mcp(client, None)
    assert resp.status == 401
    challenge = resp.headers["WWW-Authenticate"]
    assert challenge.startswith("Bearer ") and metadata in challenge
    assert "invalid_token" not in challenge  # nothing was sent
    for sent in ("mneme_at_not-a-token", "not-a-key-at-all"):
        resp = await post_mcp(client, sent)
        assert resp.status == 401
        assert metadata in resp.headers["WWW-Authenticate"]
        assert 'error="invalid_token"' in resp.headers["WWW-Authenticate"]
    # REST routes keep their plain challenge.
    resp = await client.get("/api/v1/memories")
    assert resp.headers["WWW-Authenticate"] == 'Bearer realm="mneme"'


async def test_the_discovery_documents_name_the_flow(client: Client) -> None:
    base = base_of(client)
    for path in (
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ):
        resp = await client.get(path)
        assert resp.status == 200
        document = await resp.json()
        assert document["resource"] == f"{base}/mcp"
        assert document["authorization_servers"] == [base]
        assert document["scopes_supported"] == BOTH
    resp = await client.get("/.well-known/oauth-authorization-server")
    server = await resp.json()
    assert server["issuer"] == base
    for field, path in [
        ("authorization_endpoint", "/oauth/authorize"),
        ("token_endpoint", "/oauth/token"),
        ("registration_endpoint", "/oauth/register"),
        ("revocation_endpoint", "/oauth/revoke"),
    ]:
        assert server[field] == base + path
    assert server["response_types_supported"] == ["code"]
    assert server["grant_types_supported"] == ["authorization_code", "refresh_token"]
    assert server["code_challenge_methods_supported"] == ["S256"]
    assert "none" in server["token_endpoint_auth_methods_supported"]


async def test_the_public_url_names_everything_behind_a_proxy(
    make_client: Callable[[Settings], Awaitable[Client]], settings: Settings
) -> None:
    client = await make_client(settings.with_overrides(public_url="https://mneme.example.com"))
    resp = await post_mcp(client, None)
    assert (
        'resource_metadata="https://mneme.example.com/.well-known/oauth-protected-resource"'
        in resp.headers["WWW-Authenticate"]
    )
    document = await (await client.get("/.well-known/oauth-protected-resource")).json()
    assert document["resource"] == "https://mneme.example.com/mcp"
    server = await (await client.get("/.well-known/oauth-authorization-server")).json()
    assert server["issuer"] == "https://mneme.example.com"
    assert server["token_endpoint"] == "https://mneme.example.com/oauth/token"


# --- the official Python SDK's client, end to end -------------------------------------------


async def test_the_python_sdk_client_connects_remembers_recalls_and_refreshes(
    make_client: Callable[[Settings], Awaitable[Client]], settings: Settings
) -> None:
    # Long enough for the calls after a refresh to finish on the new token on a slow box.
    client = await make_client(settings.with_overrides(oauth_access_ttl_s=5.0))
    base = base_of(client)
    key = await make_key(client, kind="service", scopes=BOTH, name="alice's laptop")
    store = {"name": "agent-notes"}
    resp = await client.post("/api/v1/forward/memory_stores", json=store, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    store_id = (await resp.json())["id"]
    answers: list[Answer] = []

    async def open_browser(authorization_url: str) -> None:
        answers.append(await consent(authorization_url, key, store="agent-notes"))

    async def redirected() -> AuthorizationCodeResult:
        query = answers[-1].query
        return AuthorizationCodeResult(
            code=query["code"], state=query.get("state"), iss=query.get("iss")
        )

    storage = MemoryStorage()
    auth = OAuthClientProvider(
        f"{base}/mcp",
        OAuthClientMetadata(client_name="pytest agent", redirect_uris=[REDIRECT]),  # type: ignore[list-item]
        storage,
        redirect_handler=open_browser,
        callback_handler=redirected,
    )
    async with (
        create_mcp_http_client(auth=auth) as http,
        McpClient(streamable_http_client(f"{base}/mcp", http_client=http)) as agent,
    ):
        remembered = await call(
            agent, "remember", text="The OAuth agent's favourite tea is oolong."
        )
        assert remembered["store"] == store_id  # the store chosen on the consent page
        await asyncio.sleep(5.5)  # the access token expires; the SDK refreshes it
        recalled = await call(agent, "recall", query="Which tea does the OAuth agent like?")
    assert [m["id"] for m in recalled][:1] == [remembered["id"]]
    assert len(answers) == 1  # one consent, then refresh
    assert (
        len(storage.issued) == 2
        and storage.issued[0].refresh_token != storage.issued[1].refresh_token
    )
    first, second = (t.access_token for t in storage.issued)
    assert (await post_mcp(client, first)).status == 401  # expired
    assert (await post_mcp(client, second)).status == 200

    grants = await (
        await client.get("/api/v1/oauth/grants", headers={"Authorization": f"Bearer {key}"})
    ).json()
    [grant] = grants["data"]
    assert grant["client_name"] == "pytest agent" and grant["store"] == "agent-notes"
    assert grant["scopes"] == BOTH and grant["redirect_hosts"] == ["http://127.0.0.1:9"]
    resp = await client.delete(
        f"/api/v1/oauth/grants/{grant['id']}", headers={"Authorization": f"Bearer {key}"}
    )
    assert resp.status == 204
    resp = await post_mcp(client, second)
    assert resp.status == 401 and 'error="invalid_token"' in resp.headers["WWW-Authenticate"]


# --- hostile cases --------------------------------------------------------------------------


async def register_status(base: str, **metadata: Any) -> tuple[int, dict[str, Any]]:
    body = {"client_name": "x", "redirect_uris": [REDIRECT], **metadata}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{base}/oauth/register", json=body) as resp,
    ):
        return resp.status, await resp.json()


async def test_registration_takes_only_https_or_loopback_redirects(client: Client) -> None:
    base = base_of(client)
    for uri in ("http://evil.example/cb", "myapp://callback", "https://app.example/cb#x",
                "ftp://app.example/cb"):  # fmt: skip
        status, body = await register_status(base, redirect_uris=[uri])
        assert status == 400 and body["error"] == "invalid_redirect_uri", (uri, body)
    for uri in ("https://claude.ai/api/mcp/auth_callback", "http://localhost:6274/cb",
                "http://[::1]:8000/cb", REDIRECT):  # fmt: skip
        status, body = await register_status(base, redirect_uris=[uri])
        assert status == 201, (uri, body)
    status, body = await register_status(base, scope="admin")
    assert status == 400 and body["error"] == "invalid_client_metadata"


async def test_an_unknown_client_or_a_redirect_one_character_off_is_not_redirected(
    client: Client,
) -> None:
    agent = await HandClient.register(base_of(client))
    _, challenge = pkce()
    for url in (
        agent.authorization_url(challenge, redirect_uri=REDIRECT + "x"),
        agent.authorization_url(challenge, redirect_uri=REDIRECT.replace("9", "8")),
        agent.authorization_url(challenge, client_id="no-such-client"),
    ):
        resp = await client.get(url.removeprefix(base_of(client)), allow_redirects=False)
        assert resp.status == 400, await resp.text()
        assert "Location" not in resp.headers
        assert (await resp.json())["error"] == "invalid_request"


async def test_pkce_plain_or_missing_is_refused(client: Client) -> None:
    agent = await HandClient.register(base_of(client))
    verifier, challenge = pkce()
    for url in (
        agent.authorization_url(verifier, code_challenge_method="plain"),
        agent.authorization_url(challenge).replace(f"code_challenge={challenge}&", ""),
    ):
        resp = await client.get(url.removeprefix(base_of(client)), allow_redirects=False)
        assert resp.status == 302
        answer = Answer(302, resp.headers["Location"], "")
        assert answer.query["error"] == "invalid_request" and "code" not in answer.query


async def test_a_resource_other_than_this_servers_mcp_is_refused(client: Client) -> None:
    agent = await HandClient.register(base_of(client))
    _, challenge = pkce()
    url = agent.authorization_url(challenge, resource="https://evil.example/mcp")
    resp = await client.get(url.removeprefix(base_of(client)), allow_redirects=False)
    assert resp.status == 302
    assert Answer(302, resp.headers["Location"], "").query["error"] == "invalid_target"


async def test_a_code_works_once_and_its_replay_ends_the_grant(client: Client) -> None:
    agent = await HandClient.register(base_of(client))
    key = await make_key(client, kind="service", scopes=BOTH)
    code, verifier = await agent.code(key)
    status, tokens = await agent.exchange(code, verifier)
    assert status == 200 and tokens["access_token"].startswith("mneme_at_")
    assert tokens["token_type"] == "Bearer" and tokens["expires_in"] == 3600
    assert (await post_mcp(client, tokens["access_token"])).status == 200
    status, replay = await agent.exchange(code, verifier)
    assert status == 400 and replay["error"] == "invalid_grant"
    assert (await post_mcp(client, tokens["access_token"])).status == 401  # the family died
    status, refreshed = await agent.refresh(tokens["refresh_token"])
    assert status == 400 and refreshed["error"] == "invalid_grant"


async def test_a_code_with_the_wrong_verifier_or_client_is_refused(client: Client) -> None:
    agent = await HandClient.register(base_of(client))
    other = await HandClient.register(base_of(client))
    key = await make_key(client, kind="service", scopes=BOTH)
    code, verifier = await agent.code(key)
    status, body = await agent.exchange(code, pkce()[0])
    assert status == 400 and body["error"] == "invalid_grant"
    status, body = await other.exchange(code, verifier)
    assert status == 400 and body["error"] == "invalid_grant"
    status, body = await agent.token(
        grant_type="authorization_code", code=code, code_verifier=verifier,
        redirect_uri=REDIRECT + "x",
    )  # fmt: skip
    assert status == 400 and body["error"] == "invalid_request"


async def test_a_refresh_token_replayed_after_rotation_ends_the_family(client: Client) -> None:
    agent = await HandClient.register(base_of(client))
    key = await make_key(client, kind="service", scopes=BOTH)
    first = await agent.tokens(key)
    status, second = await agent.refresh(first["refresh_token"])
    assert status == 200 and second["refresh_token"] != first["refresh_token"]
    assert (await post_mcp(client, second["access_token"])).status == 200
    status, replay = await agent.refresh(first["refresh_token"])  # stolen, used again
    assert status == 400 and replay["error"] == "invalid_grant"
    assert (await post_mcp(client, second["access_token"])).status == 401
    status, body = await agent.refresh(second["refresh_token"])
    assert status == 400 and body["error"] == "invalid_grant"


async def memories_count(client: Client) -> int:
    resp = await client.get("/api/v1/memories", headers=ADMIN)
    assert resp.status == 200
    return len((await resp.json())["data"])


async def test_a_read_only_grant_calling_remember_writes_nothing(client: Client) -> None:
    agent = await HandClient.register(base_of(client))
    key = await make_key(client, kind="service", scopes=BOTH)
    tokens = await agent.tokens(key, access="read")
    assert tokens["scope"] == "memory:read"
    before = await memories_count(client)
    async with McpClient(
        streamable_http_client(
            f"{base_of(client)}/mcp",
            http_client=create_mcp_http_client(
                headers={"Authorization": f"Bearer {tokens['access_token']}"}
            ),
        )
    ) as mcp:
        text = await refused(mcp, "remember", text="This must not be stored.")
        assert "memory:write" in text
        assert await call(mcp, "recall", query="anything stored?") == []
    assert await memories_count(client) == before


async def test_a_read_only_key_cannot_approve_write(client: Client) -> None:
    agent = await HandClient.register(base_of(client))
    key = await make_key(client, kind="service", scopes=["memory:read"])
    _, challenge = pkce()
    answer = await consent(agent.authorization_url(challenge), key, access="write")
    assert answer.status == 400 and "memory:write" in answer.page and answer.location is None
    tokens = await agent.tokens(key, access="read")
    assert tokens["scope"] == "memory:read"


def token_client(client: Client, token: str) -> McpClient:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return McpClient(streamable_http_client(f"{base_of(client)}/mcp", http_client=http))


async def test_two_peoples_tokens_see_only_what_their_keys_may_read(client: Client) -> None:
    for member, kind in (("alice", "human"), ("bob", "human"), ("bot", "agent")):
        await make_member(client, member, kind)
    body = {"text": "Alice's locker code is 7316.", "scope": "pair:alice:bot"}
    resp = await client.post("/api/v1/memories", json=body, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    memory_id = (await resp.json())["id"]
    agent = await HandClient.register(base_of(client))
    alice = await agent.tokens(await make_key(client, kind="personal", member="alice", scopes=BOTH))
    bob = await agent.tokens(await make_key(client, kind="personal", member="bob", scopes=BOTH))
    question = "What is Alice's locker code?"
    async with token_client(client, alice["access_token"]) as mcp:
        assert [m["id"] for m in await call(mcp, "recall", query=question)] == [memory_id]
    async with token_client(client, bob["access_token"]) as mcp:
        assert await call(mcp, "recall", query=question) == []
        assert await call(mcp, "browse") == []


async def test_a_token_ends_with_its_key_and_works_only_on_mcp(client: Client) -> None:
    agent = await HandClient.register(base_of(client))
    resp = await client.post(
        "/api/v1/keys", json={"kind": "service", "scopes": BOTH}, headers=ADMIN
    )
    created = await resp.json()
    tokens = await agent.tokens(created["key"])
    access = {"Authorization": f"Bearer {tokens['access_token']}"}
    resp = await client.get("/api/v1/memories", headers=access)
    assert resp.status == 401 and "/mcp only" in (await resp.json())["error"]["message"]
    assert (await post_mcp(client, tokens["access_token"])).status == 200
    resp = await client.delete(f"/api/v1/keys/{created['id']}", headers=ADMIN)
    assert resp.status in (200, 204)
    assert (await post_mcp(client, tokens["access_token"])).status == 401
    status, body = await agent.refresh(tokens["refresh_token"])
    assert status == 400 and body["error"] == "invalid_grant"


async def test_the_consent_form_needs_its_own_csrf_cookie_and_answers_once(
    client: Client,
) -> None:
    agent = await HandClient.register(base_of(client))
    key = await make_key(client, kind="service", scopes=BOTH)
    url = agent.authorization_url(pkce()[1])
    forged = await consent(url, key, csrf="forged-token-from-another-page")
    assert forged.status == 403 and forged.location is None
    # A form posted from elsewhere carries the request's fields but not the cookie.
    page = await client.get(url.removeprefix(base_of(client)))
    html = await page.text()
    assert page.headers["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    fields = {name: hidden(html, name) for name in ("request", "csrf")}
    async with aiohttp.ClientSession() as elsewhere:  # no cookie of the page's
        form = {**fields, "key": key, "access": "write", "store": "default", "decision": "approve"}
        async with elsewhere.post(f"{base_of(client)}/oauth/consent", data=form,
                                  allow_redirects=False) as resp:  # fmt: skip
            assert resp.status == 403 and "Location" not in resp.headers
    wrong = await consent(url, "mneme_sk_not-a-real-key")
    assert wrong.status == 400 and wrong.location is None
    assert "not a valid Mneme key" in wrong.page and "not-a-real-key" not in wrong.page
    approved = await consent(url, key)
    assert approved.status == 303 and "code" in approved.query


async def test_deny_sends_the_person_back_with_access_denied(client: Client) -> None:
    agent = await HandClient.register(base_of(client))
    _, challenge = pkce()
    answer = await consent(agent.authorization_url(challenge, state="xyz"), "", decision="deny")
    assert answer.status == 303 and answer.location is not None
    assert answer.location.startswith(REDIRECT)
    assert answer.query == {"error": "access_denied", "state": "xyz", "iss": base_of(client)}


async def test_the_revocation_endpoint_ends_the_grant(client: Client) -> None:
    agent = await HandClient.register(base_of(client))
    key = await make_key(client, kind="service", scopes=BOTH)
    tokens = await agent.tokens(key)
    async with aiohttp.ClientSession() as http:
        form = {"client_id": agent.client_id, "token": tokens["refresh_token"]}
        async with http.post(f"{base_of(client)}/oauth/revoke", data=form) as resp:
            assert resp.status == 200
    assert (await post_mcp(client, tokens["access_token"])).status == 401
    grants = await client.get("/api/v1/oauth/grants", headers={"Authorization": f"Bearer {key}"})
    assert (await grants.json())["data"] == []


async def test_a_key_lists_and_revokes_only_its_own_grants(client: Client) -> None:
    agent = await HandClient.register(base_of(client), client_name="Claude")
    mine = await make_key(client, kind="service", scopes=BOTH)
    theirs = await make_key(client, kind="service", scopes=BOTH)
    await agent.tokens(mine)
    their_tokens = await agent.tokens(theirs)
    listed = await (
        await client.get("/api/v1/oauth/grants", headers={"Authorization": f"Bearer {mine}"})
    ).json()
    [grant] = listed["data"]
    assert grant["client_name"] == "Claude"
    every = await (await client.get("/api/v1/oauth/grants", headers=ADMIN)).json()
    assert len(every["data"]) == 2  # an admin key sees the workspace's
    [their_grant] = [g for g in every["data"] if g["id"] != grant["id"]]
    resp = await client.delete(f"/api/v1/oauth/grants/{their_grant['id']}",
                               headers={"Authorization": f"Bearer {mine}"})  # fmt: skip
    assert resp.status == 404
    assert (await post_mcp(client, their_tokens["access_token"])).status == 200


async def test_a_confidential_client_authenticates_with_its_secret(client: Client) -> None:
    base = base_of(client)
    status, registered = await register_status(
        base, token_endpoint_auth_method="client_secret_post"
    )
    assert status == 201 and registered["client_secret"]
    agent = HandClient(base, registered["client_id"])
    key = await make_key(client, kind="service", scopes=BOTH)
    code, verifier = await agent.code(key)
    status, body = await agent.exchange(code, verifier)  # no secret
    assert status == 401 and body["error"] == "invalid_client"
    status, body = await agent.token(
        grant_type="authorization_code", code=code, code_verifier=verifier,
        redirect_uri=REDIRECT, client_secret=registered["client_secret"] + "x",
    )  # fmt: skip
    assert status == 401 and body["error"] == "invalid_client"
    status, body = await agent.token(
        grant_type="authorization_code", code=code, code_verifier=verifier,
        redirect_uri=REDIRECT, client_secret=registered["client_secret"],
    )  # fmt: skip
    assert status == 200 and body["access_token"].startswith("mneme_at_")


async def test_secrets_are_stored_only_as_hashes(client: Client, db_url: str) -> None:
    base = base_of(client)
    status, registered = await register_status(
        base, token_endpoint_auth_method="client_secret_post"
    )
    assert status == 201, registered
    agent = HandClient(base, registered["client_id"])
    code, verifier = await agent.code(await make_key(client, kind="service", scopes=BOTH))
    _, tokens = await agent.token(
        grant_type="authorization_code", code=code, code_verifier=verifier,
        redirect_uri=REDIRECT, client_secret=registered["client_secret"],
    )  # fmt: skip
    conn = await asyncpg.connect(db_url)
    try:
        dump = ""
        for table in (
            "oauth_clients",
            "oauth_requests",
            "oauth_grants",
            "oauth_codes",
            "oauth_tokens",
        ):
            rows = await conn.fetch(f"SELECT * FROM {table}")
            dump += repr([dict(r) for r in rows])
    finally:
        await conn.close()
    for secret in (
        registered["client_secret"],
        code,
        tokens["access_token"],
        tokens["refresh_token"],
    ):
        assert secret not in dump


async def test_bad_oauth_input_is_a_client_error_never_a_500(client: Client) -> None:
    cases = [
        ("POST", "/oauth/register", b"not json"),
        ("POST", "/oauth/register", b'{"redirect_uris": "x"}'),
        ("POST", "/oauth/register", b'{"jwks": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"),
        ("POST", "/oauth/token", b"grant_type=password&username=a"),
        ("POST", "/oauth/token", b"client_id=%00&grant_type=authorization_code"),
        ("POST", "/oauth/revoke", b"token=x"),
        ("GET", "/oauth/authorize?response_type=token&client_id=x", b""),
        ("GET", "/oauth/consent?request=nope", b""),
        ("POST", "/oauth/consent", b"request=%00&csrf=%00&key=%00"),
        ("POST", "/oauth/consent", b"\xff\xfe"),
    ]
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    for method, path, body in cases:
        headers = {"Content-Type": "application/json"} if "register" in path else form
        resp = await client.request(method, path, data=body, headers=headers, allow_redirects=False)
        assert 400 <= resp.status < 500, (path, body, resp.status, await resp.text())


async def test_mneme_oauth_lists_and_revokes_connected_clients(client: Client, db_url: str) -> None:
    agent = await HandClient.register(base_of(client), client_name="ChatGPT")
    key = await make_key(client, kind="service", scopes=BOTH, name="cli")
    tokens = await agent.tokens(key, access="read")
    listing = mneme(db_url, "oauth list").stdout
    line = next(row for row in listing.splitlines() if "ChatGPT" in row)
    grant_id = line.split()[0]
    assert grant_id.startswith("grant_") and "memory:read" in line and "127.0.0.1:9" in line
    assert tokens["access_token"] not in listing
    result = mneme(db_url, f"oauth revoke {grant_id}")
    assert result.returncode == 0, result.stderr
    assert (await post_mcp(client, tokens["access_token"])).status == 401
    assert "ChatGPT" not in mneme(db_url, "oauth list").stdout
    assert "ChatGPT" in mneme(db_url, "oauth list --all").stdout
    missing = mneme(db_url, "oauth revoke grant_nope")
    assert missing.returncode == 1 and "no connected client" in missing.stderr


# --- issue 59: where the code goes, what registration may add, and no 500s ------------------

HIDDEN_HOST = "https://attacker.example?@claude.ai/cb"


async def test_a_redirect_uri_that_hides_its_host_is_refused_at_registration(
    client: Client,
) -> None:
    base = base_of(client)
    status, body = await register_status(base, client_name="Claude", redirect_uris=[HIDDEN_HOST])
    assert status == 400 and body["error"] == "invalid_redirect_uri", body
    for uri in (
        "https://claude.ai@attacker.example/cb",  # userinfo
        "https://attacker.example/cb?next=@claude.ai",  # an '@' anywhere
        "https://attacker.example\\@claude.ai/cb",  # a browser reads '\' as '/'
        "https://claude.ai/cb#",  # an empty fragment
        "https://claude.ai/c b",
        "https://claude.ai/cb\t",
        " https://claude.ai/cb",
        "https://claude.ai/cb\u200b",  # invisible
        "https://cl%61ude.ai/cb",  # percent-encoding in the host
        "https://claude.ai:/cb",  # a netloc that is not just the host and port
        "https://0x7f.1/cb",  # a browser goes to 127.0.0.1
        "https://[claude.ai/cb",  # an IPv6 bracket left open: not a URL (was a 500)
        "https://claude.ai]/cb",
    ):
        status, body = await register_status(base, redirect_uris=[uri])
        assert status == 400 and body["error"] == "invalid_redirect_uri", (uri, body)
    for uri in ("https://Claude.AI/api/mcp/auth_callback", "https://claude.ai:8443/cb",
                "https://münchen.example/cb"):  # fmt: skip
        status, body = await register_status(base, redirect_uris=[uri])
        assert status == 201, (uri, body)


async def insert_client(client: Client, redirect_uri: str, name: str) -> str:
    """A client registered before today's rules: a row of an older version."""
    metadata = {
        "client_name": name,
        "redirect_uris": [redirect_uri],
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "scope": "memory:read memory:write",
        "client_id": "older-client",
    }
    await oauth.insert_client(client.app[POOL], "older-client", metadata, None)
    return "older-client"


async def test_the_consent_page_and_connected_apps_name_where_the_code_goes(
    client: Client,
) -> None:
    base = base_of(client)
    agent = HandClient(base, await insert_client(client, HIDDEN_HOST, "Claude"), HIDDEN_HOST)
    key = await make_key(client, kind="service", scopes=BOTH)
    # Its one registered URI, as the review's client did (one sent would be normalised).
    url = agent.authorization_url(pkce()[1], redirect_uri=None)
    page = await (await client.get(url.removeprefix(base))).text()
    assert '<span class="host">https://attacker.example</span>' in page
    assert "claude.ai" not in page
    answer = await consent(url, key)
    assert answer.status == 303 and answer.location is not None
    assert urlsplit(answer.location).hostname == "attacker.example"
    grants = await (await client.get("/api/v1/oauth/grants", headers=ADMIN)).json()
    assert [g["redirect_hosts"] for g in grants["data"]] == [["https://attacker.example"]]


async def test_connected_apps_show_scheme_host_and_a_port_only_when_not_the_default(
    client: Client,
) -> None:
    base = base_of(client)
    status, registered = await register_status(
        base,
        redirect_uris=["https://App.Example:443/a", "https://app.example:8443/b", REDIRECT],
        token_endpoint_auth_method="none",
    )
    assert status == 201, registered
    key = await make_key(client, kind="service", scopes=BOTH)
    await HandClient(base, registered["client_id"]).tokens(key)
    grants = await (await client.get("/api/v1/oauth/grants", headers=ADMIN)).json()
    assert grants["data"][0]["redirect_hosts"] == [
        "http://127.0.0.1:9", "https://app.example", "https://app.example:8443",
    ]  # fmt: skip


async def post_register(client: Client, body: bytes, **headers: str) -> aiohttp.ClientResponse:
    return await client.post(
        "/oauth/register", data=body, headers={"Content-Type": "application/json", **headers}
    )


async def test_a_registration_body_over_64_kib_is_refused_before_it_is_parsed(
    client: Client, db_url: str
) -> None:
    padded = {"client_name": "x", "redirect_uris": [REDIRECT], "pad": "p" * 70_000}
    resp = await post_register(client, json.dumps(padded).encode())
    assert resp.status == 413, await resp.text()
    assert (await resp.json())["error"]["type"] == "request_too_large"

    async def chunks() -> Any:  # no Content-Length: the cap holds on the bytes that came
        for _ in range(70):
            yield b" " * 1024
        yield json.dumps({"client_name": "x", "redirect_uris": [REDIRECT]}).encode()

    resp = await client.post(
        "/oauth/register", data=chunks(), headers={"Content-Type": "application/json"}
    )
    assert resp.status == 413, await resp.text()
    conn = await asyncpg.connect(db_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM oauth_clients") == 0
    finally:
        await conn.close()


async def test_registration_fields_are_bounded(client: Client) -> None:
    base = base_of(client)
    uri = "https://app.example/"
    accepted: list[dict[str, Any]] = [
        {"client_name": "n" * 200},
        {"redirect_uris": [f"{uri}{i}" for i in range(10)]},
        {"redirect_uris": [uri + "p" * (2000 - len(uri))]},
        {"client_uri": uri + "c" * (2000 - len(uri))},
    ]
    for metadata in accepted:
        status, body = await register_status(base, **metadata)
        assert status == 201, (str(metadata)[:80], body)
    refused: list[tuple[dict[str, Any], str]] = [
        ({"client_name": "n" * 201}, "invalid_client_metadata"),
        ({"redirect_uris": [f"{uri}{i}" for i in range(11)]}, "invalid_client_metadata"),
        ({"redirect_uris": [uri + "p" * (2001 - len(uri))]}, "invalid_redirect_uri"),
        ({"redirect_uris": [uri + "é" * 1000]}, "invalid_redirect_uri"),  # 2,000 bytes+
        ({"client_uri": uri + "c" * (2001 - len(uri))}, "invalid_client_metadata"),
        ({"software_id": "s" * 2001}, "invalid_client_metadata"),
        ({"contacts": [f"c{i}@example.com" for i in range(11)]}, "invalid_client_metadata"),
    ]
    for metadata, error in refused:
        status, body = await register_status(base, **metadata)
        assert status == 400 and body["error"] == error, (str(metadata)[:80], body)


async def test_registrations_are_rate_limited_per_address_across_processes(
    make_client: Callable[[Settings], Awaitable[Client]], settings: Settings
) -> None:
    limited = settings.with_overrides(oauth_registrations_per_hour=3)
    first, second = await make_client(limited), await make_client(limited)
    for one in (first, second, first):
        status, body = await register_status(base_of(one))
        assert status == 201, body
    for one in (first, second):
        resp = await post_register(one, json.dumps({"redirect_uris": [REDIRECT]}).encode())
        assert resp.status == 429, await resp.text()
        assert 1 <= int(resp.headers["Retry-After"]) <= 3600
        refused = await resp.json()
        assert refused["type"] == "error" and refused["error"]["type"] == "rate_limit_error"
        assert "3 registrations an hour" in refused["error"]["message"]


async def test_the_janitor_prunes_clients_never_granted_after_a_day(
    client: Client, db_url: str
) -> None:
    base = base_of(client)
    key = await make_key(client, kind="service", scopes=BOTH)
    granted = await HandClient.register(base)
    await granted.tokens(key)
    await HandClient.register(base)  # never granted: pruned
    fresh = await HandClient.register(base)
    conn = await asyncpg.connect(db_url)
    try:
        await conn.execute(
            "UPDATE oauth_clients SET created_at = now() - interval '25 hours' WHERE id <> $1",
            fresh.client_id,
        )
        # This process's janitor, one pass now rather than within the minute.
        holder = "SELECT holder FROM leases WHERE name = 'janitor'"
        await wait_for(lambda: conn.fetchval(holder), 30, "the janitor's lease")
        assert await jobs.janitor_pass(client.app, await conn.fetchval(holder), retention=False)
        left = {r["id"] for r in await conn.fetch("SELECT id FROM oauth_clients")}
    finally:
        await conn.close()
    assert left == {granted.client_id, fresh.client_id}


async def test_a_consent_form_with_too_many_fields_is_a_400(client: Client) -> None:
    body = "&".join(f"f{i}=x" for i in range(25)).encode()
    resp = await client.post(
        "/oauth/consent",
        data=body,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        allow_redirects=False,
    )
    assert resp.status == 400, await resp.text()
    assert "Too many fields" in await resp.text()


async def test_a_client_registered_for_write_only_gets_what_the_page_says(
    client: Client,
) -> None:
    base = base_of(client)
    status, registered = await register_status(
        base, scope="memory:write", token_endpoint_auth_method="none"
    )
    assert status == 201, registered
    agent = HandClient(base, registered["client_id"])
    key = await make_key(client, kind="service", scopes=BOTH)
    tokens = await agent.tokens(key, access="write")  # the page's "Read and write"
    assert tokens["scope"] == "memory:read memory:write"
    tokens = await agent.tokens(key, access="read")
    assert tokens["scope"] == "memory:read"
    write_only = await make_key(client, kind="service", scopes=["memory:write"])
    answer = await consent(agent.authorization_url(pkce()[1]), write_only, access="write")
    assert answer.status == 400 and "lacks memory:read" in answer.page


async def authorization_responses(client: Client, issuer: str) -> list[dict[str, str]]:
    """What comes back to a client: approved, denied, and refused by the authorization
    endpoint itself (a foreign resource)."""
    base = base_of(client)
    agent = await HandClient.register(base)
    key = await make_key(client, kind="service", scopes=BOTH)
    answers = []
    for decision, resource in (("approve", None), ("deny", None), ("", "https://evil.example")):
        url = agent.authorization_url(pkce()[1], resource=resource).removeprefix(base)
        location: str | None = (await client.get(url, allow_redirects=False)).headers["Location"]
        if decision and location is not None:  # the consent page, reached on this test server
            location = (await consent(base + location.removeprefix(issuer), key,
                                      decision=decision)).location  # fmt: skip
        answers.append(Answer(303, location, "").query)
    return answers


async def test_the_authorization_response_names_its_issuer(
    make_client: Callable[[Settings], Awaitable[Client]], settings: Settings
) -> None:
    # (http: the page's CSRF cookie is Secure behind https, and this test client is not.)
    for public_url in (None, "http://mneme.example.com"):
        client = await make_client(settings.with_overrides(public_url=public_url))
        issuer = public_url or base_of(client)
        server = await (await client.get("/.well-known/oauth-authorization-server")).json()
        assert server["issuer"] == issuer
        assert server["authorization_response_iss_parameter_supported"] is True
        approved, denied, refused = await authorization_responses(client, issuer)
        assert "code" in approved and denied["error"] == "access_denied"
        assert refused["error"] == "invalid_target"
        assert approved["iss"] == denied["iss"] == refused["iss"] == issuer


def test_serve_warns_when_the_issuer_would_come_from_the_host_header() -> None:
    warned = issuer_warning(Settings(host="0.0.0.0"))  # noqa: S104 - what is judged
    assert warned is not None and "MNEME_PUBLIC_URL" in warned
    for quiet in (
        Settings(host="127.0.0.1"),
        Settings(host="localhost"),
        Settings(host="::1"),
        Settings(host="0.0.0.0", public_url="https://mneme.example.com"),  # noqa: S104
    ):
        assert issuer_warning(quiet) is None, quiet
