"""The MCP SDK's authorization-server provider protocol, over PostgreSQL.

The SDK's handlers (``mcp.server.auth.handlers``) parse and validate every request:
registration metadata (RFC 7591), the authorization request (``response_type=code``,
PKCE ``S256`` only, the redirect URI exactly as registered, scopes within the client's),
the token request (the code's client and expiry, the redirect URI again, the PKCE
verifier against the challenge, refresh scopes within the original). This class stores
and spends what they validated, and adds what the SDK leaves to a provider:

- a redirect URI must be https, or http on a loopback host, and its host plain to see
  (``register_client``, ``service.oauth.registration``);
- the resource indicator (RFC 8707), when sent, must be this server's ``/mcp``;
- a code or refresh token presented a second time revokes its grant, so a stolen one is
  worth nothing once its owner has used it (OAuth 2.1 §4.3.1, §6.1);
- a grant whose key is revoked issues nothing more.

``HashedClientAuthenticator`` is the SDK's client authentication with the client secret
compared as a SHA-256, since only that is stored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import asyncpg
from mcp.server.auth.middleware.client_auth import AuthenticationError, ClientAuthenticator
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    RefreshToken,
    RegistrationError,
    TokenError,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.requests import Request

from service.decoding import nul_path, string_problem
from service.oauth.registration import check_redirect_uri
from service.queries import oauth

SCOPES = ["memory:read", "memory:write"]
CONSENT_PATH = "/oauth/consent"


class GrantCode(AuthorizationCode):
    grant_id: str


class GrantRefreshToken(RefreshToken):
    grant_id: str


class GrantAccessToken(AccessToken):
    grant_id: str


def _token_fields(row: asyncpg.Record) -> dict[str, Any]:
    """A stored token's fields, as the SDK's token models name them."""
    return {
        "client_id": row["client_id"],
        "scopes": list(row["scopes"]),
        "expires_at": row["expires_at"],
        "resource": row["resource"],
        "grant_id": row["grant_id"],
    }


@dataclass
class Provider:
    """One request's provider: the pool, and the resource its tokens are for."""

    pool: asyncpg.Pool
    resource: str  # <base>/mcp
    consent_url: str  # <base>/oauth/consent
    access_ttl_s: float

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        if string_problem(client_id) is not None:
            return None  # no id of ours holds a NUL (nor can PostgreSQL compare one)
        found = await oauth.client(self.pool, client_id)
        if found is None:
            return None
        metadata, secret_sha256 = found
        # The SDK reads ``client_secret`` only to know whether the client has one; the
        # authenticator below compares against it: the hash, the only thing stored.
        return OAuthClientInformationFull.model_validate(
            {**metadata, "client_secret": None if secret_sha256 is None else secret_sha256.hex()}
        )

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        for uri in client_info.redirect_uris or []:
            check_redirect_uri(str(uri))
        metadata = client_info.model_dump(mode="json", exclude={"client_secret"})
        if (path := nul_path(metadata)) is not None:
            raise RegistrationError("invalid_client_metadata", f"{path} holds a NUL character")
        await oauth.insert_client(
            self.pool, client_info.client_id or "", metadata, client_info.client_secret
        )

    def _check_resource(self, resource: str | None) -> None:
        if resource is not None and resource.rstrip("/") not in (
            self.resource,
            self.resource.removesuffix("/mcp"),
        ):
            raise AuthorizeError("invalid_target", f"this server's resource is {self.resource}")

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        self._check_resource(params.resource)
        stored = params.model_dump(mode="json")
        if (path := nul_path(stored)) is not None:
            raise AuthorizeError("invalid_request", f"{path} holds a NUL character")
        request_id = await oauth.insert_request(self.pool, client.client_id or "", stored)
        return f"{self.consent_url}?request={request_id}"

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> GrantCode | None:
        row = await oauth.code(self.pool, authorization_code)
        if row is None or row["client_id"] != client.client_id:
            return None
        return GrantCode(
            code=authorization_code,
            scopes=list(row["scopes"]),
            expires_at=row["expires_at"],
            client_id=row["client_id"],
            code_challenge=row["code_challenge"],
            redirect_uri=row["redirect_uri"],
            redirect_uri_provided_explicitly=row["redirect_uri_explicit"],
            resource=row["resource"],
            grant_id=row["grant_id"],
        )

    async def _issue(
        self, conn: asyncpg.Connection, grant_id: str, scopes: list[str], resource: str | None
    ) -> OAuthToken:
        issued = await oauth.issue_tokens(conn, grant_id, scopes, resource, self.access_ttl_s)
        if issued is None:
            raise TokenError("invalid_grant", "this grant was revoked, or the key that approved it")
        return OAuthToken(
            access_token=issued.access,
            expires_in=int(self.access_ttl_s),
            scope=" ".join(scopes),
            refresh_token=issued.refresh,
        )

    async def _replayed(self, grant_id: str, what: str) -> TokenError:
        """A code or refresh token used a second time: whoever holds it may have stolen
        it, so the grant and every token of its family end."""
        await oauth.revoke_grant(self.pool, grant_id)
        return TokenError("invalid_grant", f"this {what} was already used; its grant is revoked")

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: GrantCode
    ) -> OAuthToken:
        async with self.pool.acquire() as conn, conn.transaction():
            if await oauth.spend_code(conn, authorization_code.code):
                return await self._issue(
                    conn,
                    authorization_code.grant_id,
                    authorization_code.scopes,
                    authorization_code.resource,
                )
        raise await self._replayed(authorization_code.grant_id, "authorization code")

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> GrantRefreshToken | None:
        row = await oauth.token(self.pool, refresh_token, "refresh")
        if row is None or row["client_id"] != client.client_id:
            return None
        return GrantRefreshToken(token=refresh_token, **_token_fields(row))

    async def exchange_refresh_token(
        self,
        client: OAuthClientInformationFull,
        refresh_token: GrantRefreshToken,
        scopes: list[str],
    ) -> OAuthToken:
        async with self.pool.acquire() as conn, conn.transaction():
            if await oauth.spend_refresh(conn, refresh_token.token):
                return await self._issue(
                    conn, refresh_token.grant_id, scopes, refresh_token.resource
                )
        raise await self._replayed(refresh_token.grant_id, "refresh token")

    async def load_access_token(self, token: str) -> GrantAccessToken | None:
        row = await oauth.token(self.pool, token, "access")
        return None if row is None else GrantAccessToken(token=token, **_token_fields(row))

    async def revoke_token(self, token: GrantAccessToken | GrantRefreshToken) -> None:
        """RFC 7009: revoking either token of a grant ends the grant (its whole family)."""
        await oauth.revoke_grant(self.pool, token.grant_id)

    async def exchange_identity_assertion(self, client: Any, params: Any) -> OAuthToken:
        raise TokenError("unsupported_grant_type", "the JWT bearer grant is not supported")


class HashedClientAuthenticator(ClientAuthenticator):
    """The SDK's ``ClientAuthenticator``, comparing the presented client secret's SHA-256
    with the stored one (the SDK compares plain secrets; only hashes are stored here)."""

    async def authenticate_request(self, request: Request) -> OAuthClientInformationFull:
        form = await request.form()
        client_id = form.get("client_id")
        if not isinstance(client_id, str) or not client_id:
            raise AuthenticationError("Missing client_id")
        client = await self.provider.get_client(client_id)
        if client is None:
            raise AuthenticationError("Invalid client_id")
        method = client.token_endpoint_auth_method
        stored = client.client_secret  # ``get_client`` puts the stored SHA-256 (hex) here
        if method == "none":
            return client
        if stored is None:
            raise AuthenticationError("Client is registered for a secret but has none")
        presented = _presented_secret(request, method, client_id, form.get("client_secret"))
        if not hmac.compare_digest(hashlib.sha256(presented.encode()).hexdigest(), stored):
            raise AuthenticationError("Invalid client_secret")
        if client.client_secret_expires_at and client.client_secret_expires_at < int(time.time()):
            raise AuthenticationError("Client secret has expired")
        return client


def _presented_secret(request: Request, method: str | None, client_id: str, posted: Any) -> str:
    """The client secret a token or revocation request carries, by the client's method."""
    if method == "client_secret_basic":
        header = request.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            raise AuthenticationError("Missing or invalid Basic authentication")
        try:
            decoded = base64.b64decode(header[6:], validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError, binascii.Error):
            raise AuthenticationError("Invalid Basic authentication header") from None
        basic_id, sep, secret = decoded.partition(":")
        if not sep or unquote(basic_id) != client_id:
            raise AuthenticationError("Client ID mismatch in Basic authentication")
        return unquote(secret)
    if method == "client_secret_post":
        if isinstance(posted, str) and posted:
            return posted
        raise AuthenticationError("Client secret is required")
    raise AuthenticationError(f"Unsupported client authentication method: {method}")
