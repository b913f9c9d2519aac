"""What an OAuth test plays: the person at the consent page, and a client doing the flow
by hand (registration, PKCE, the code's exchange) where a test needs to bend one step."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import aiohttp

REDIRECT = "http://127.0.0.1:9/callback"  # never dialled: the test reads the Location


def hidden(html: str, name: str) -> str:
    match = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert match is not None, f"no {name} field in the consent page"
    return match.group(1)


@dataclass
class Answer:
    """Where the consent page sent the browser, and what it said on the way."""

    status: int
    location: str | None
    page: str

    @property
    def query(self) -> dict[str, str]:
        assert self.location is not None, (self.status, self.page[:300])
        return {k: v[0] for k, v in parse_qs(urlsplit(self.location).query).items()}


async def consent(
    authorization_url: str,
    key: str,
    *,
    access: str = "write",
    store: str = "default",
    decision: str = "approve",
    **changed: str,
) -> Answer:
    """A person opening ``authorization_url`` in a browser, filling the form with ``key``
    and pressing Allow (or Deny). ``changed`` overrides form fields (a forged CSRF)."""
    jar = aiohttp.CookieJar(unsafe=True)  # cookies for 127.0.0.1 too
    async with aiohttp.ClientSession(cookie_jar=jar) as browser:
        async with browser.get(authorization_url) as page:
            html = await page.text()
            assert page.status == 200, (page.status, html[:300])
            assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
            form_url = str(page.url).split("?", 1)[0]
        form = {
            "request": hidden(html, "request"),
            "csrf": hidden(html, "csrf"),
            "key": key,
            "access": access,
            "store": store,
            "decision": decision,
            **changed,
        }
        async with browser.post(form_url, data=form, allow_redirects=False) as answered:
            return Answer(answered.status, answered.headers.get("Location"), await answered.text())


def pkce() -> tuple[str, str]:
    """A code verifier and its S256 challenge."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).decode().rstrip("=")


@dataclass
class HandClient:
    """A registered public client, one step at a time."""

    base: str
    client_id: str
    redirect: str = REDIRECT

    @classmethod
    async def register(cls, base: str, **metadata: Any) -> HandClient:
        body = {
            "client_name": "hand-rolled test client",
            "redirect_uris": [REDIRECT],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            **metadata,
        }
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{base}/oauth/register", json=body) as resp,
        ):
            registered = await resp.json()
            assert resp.status == 201, registered
        return cls(base, registered["client_id"], registered["redirect_uris"][0])

    def authorization_url(self, challenge: str, **params: str | None) -> str:
        """``params`` change the request's parameters (``None``: leave it out)."""
        query = {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": self.redirect,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": "st-" + secrets.token_hex(4),
            **params,
        }
        sent = {name: value for name, value in query.items() if value is not None}
        return f"{self.base}/oauth/authorize?{urlencode(sent)}"

    async def code(self, key: str, **consented: str) -> tuple[str, str]:
        """An authorization code a person approved with ``key``, and its verifier."""
        verifier, challenge = pkce()
        answer = await consent(self.authorization_url(challenge), key, **consented)
        assert answer.status == 303, (answer.status, answer.page[:300])
        return answer.query["code"], verifier

    async def token(self, **form: str) -> tuple[int, dict[str, Any]]:
        async with aiohttp.ClientSession() as http:
            body = {"client_id": self.client_id, **form}
            async with http.post(f"{self.base}/oauth/token", data=body) as resp:
                return resp.status, await resp.json()

    async def exchange(self, code: str, verifier: str) -> tuple[int, dict[str, Any]]:
        return await self.token(
            grant_type="authorization_code",
            code=code,
            code_verifier=verifier,
            redirect_uri=self.redirect,
        )

    async def tokens(self, key: str, **consented: str) -> dict[str, Any]:
        """Access and refresh token for a grant ``key`` approved."""
        status, tokens = await self.exchange(*await self.code(key, **consented))
        assert status == 200, tokens
        return tokens

    async def refresh(self, refresh_token: str) -> tuple[int, dict[str, Any]]:
        return await self.token(grant_type="refresh_token", refresh_token=refresh_token)
