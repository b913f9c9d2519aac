"""OAuth 2.1 for ``/mcp``: discovery, the SDK's endpoints, and the connected clients.

- Discovery needs no key: ``/.well-known/oauth-protected-resource`` (RFC 9728; also at
  ``…/mcp``) names the resource, ``<base>/mcp``, and its authorization server, ``<base>``;
  ``/.well-known/oauth-authorization-server`` (RFC 8414) its endpoints. ``<base>`` is
  ``MNEME_PUBLIC_URL``, else the request's (``service.http.public``). The documents are
  the SDK's models (``OAuthMetadata``, ``ProtectedResourceMetadata``), built per request
  because the base may differ per request; public clients (``none``) are advertised.
- ``/oauth/authorize``, ``/oauth/token``, ``/oauth/register`` and ``/oauth/revoke`` are
  the official MCP SDK's handlers (``mcp.server.auth.handlers``), served through the ASGI
  bridge as ``/mcp`` is, over ``service.oauth.provider`` (PostgreSQL). Their answers are
  the SDK's, in OAuth's error shape (RFC 6749 §5.2), not the service's; what is refused
  before a request reaches them (a body of the wrong type, 415; a registration body over
  64 KiB, 413; too many registrations from one address, 429) is in the service's.
- Registration needs no key, so it is bounded (``service.oauth.registration``); every
  authorization response names the issuer (RFC 9207's ``iss``), the consent page's too.
- ``GET /api/v1/oauth/grants`` lists the clients the calling key connected (an admin key:
  the workspace's); ``DELETE /api/v1/oauth/grants/{grant_id}`` disconnects one: its
  tokens stop working at once.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

from aiohttp import web
from mcp.server.auth.handlers.authorize import AuthorizationHandler
from mcp.server.auth.handlers.register import RegistrationHandler
from mcp.server.auth.handlers.token import TokenHandler
from mcp.server.auth.provider import RegistrationError, construct_redirect_uri
from mcp.server.auth.settings import ClientRegistrationOptions
from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata
from starlette.routing import request_response

from service.app_keys import POOL, SETTINGS
from service.http.asgi import ASGIApp, serve_asgi
from service.http.errors import ApiError
from service.http.inputs import body_of
from service.http.json import json_response
from service.http.middleware import principal_of
from service.http.public import mcp_resource, public_base
from service.http.route import Handler
from service.oauth import registration
from service.oauth.provider import CONSENT_PATH, SCOPES, HashedClientAuthenticator, Provider
from service.oauth.revocation import PublicRevocationHandler
from service.problems import NotFound
from service.queries import oauth
from service.times import iso, iso_or_none

AUTHORIZE_PATH = "/oauth/authorize"
TOKEN_PATH = "/oauth/token"  # noqa: S105 - a path
REGISTER_PATH = "/oauth/register"
REVOKE_PATH = "/oauth/revoke"
CLIENT_AUTH_METHODS = ["none", "client_secret_post", "client_secret_basic"]
# Browser-based clients (the MCP Inspector) call these from their own origin: no
# credentials ride on CORS here (the client's are in the body), so any origin may.
CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
    "Access-Control-Allow-Headers": "Authorization, Content-Type, MCP-Protocol-Version",
}
NO_STORE = {"Cache-Control": "no-store"}
REGISTRATION = ClientRegistrationOptions(enabled=True, valid_scopes=SCOPES, default_scopes=SCOPES)


# --- discovery ----------------------------------------------------------------------------


def protected_resource(request: web.Request) -> dict[str, Any]:
    document = ProtectedResourceMetadata(
        resource=mcp_resource(request),  # type: ignore[arg-type]
        authorization_servers=[public_base(request)],  # type: ignore[list-item]
        scopes_supported=SCOPES,
        resource_name="Mneme",
    )
    return document.model_dump(mode="json", exclude_none=True)


def authorization_server(request: web.Request) -> dict[str, Any]:
    base = public_base(request)
    document = OAuthMetadata(
        issuer=base,  # type: ignore[arg-type]
        authorization_endpoint=base + AUTHORIZE_PATH,  # type: ignore[arg-type]
        token_endpoint=base + TOKEN_PATH,  # type: ignore[arg-type]
        registration_endpoint=base + REGISTER_PATH,  # type: ignore[arg-type]
        revocation_endpoint=base + REVOKE_PATH,  # type: ignore[arg-type]
        scopes_supported=SCOPES,
        response_types_supported=["code"],
        grant_types_supported=["authorization_code", "refresh_token"],
        token_endpoint_auth_methods_supported=CLIENT_AUTH_METHODS,
        revocation_endpoint_auth_methods_supported=CLIENT_AUTH_METHODS,
        code_challenge_methods_supported=["S256"],
        authorization_response_iss_parameter_supported=True,  # RFC 9207
    )
    return document.model_dump(mode="json", exclude_none=True)


async def protected_resource_document(request: web.Request) -> web.Response:
    return json_response(protected_resource(request), headers=CORS)


async def authorization_server_document(request: web.Request) -> web.Response:
    return json_response(authorization_server(request), headers=CORS)


async def preflight(request: web.Request) -> web.Response:
    """OPTIONS on a discovery document or a client-facing endpoint."""
    return web.Response(status=204, headers={**CORS, "Access-Control-Max-Age": "600"})


# --- the SDK's endpoints ------------------------------------------------------------------


def provider_for(request: web.Request) -> Provider:
    return Provider(
        pool=request.app[POOL],
        resource=mcp_resource(request),
        consent_url=public_base(request) + CONSENT_PATH,
        access_ttl_s=request.app[SETTINGS].oauth_access_ttl_s,
    )


FORM = "application/x-www-form-urlencoded"


def _served(
    build: Callable[[Provider], ASGIApp], *, cors: bool = True, form: bool = True
) -> Handler:
    """An aiohttp handler serving the SDK's handler ``build`` makes for the request's
    provider (cheap: dataclasses around the pool). A POST whose body is not a form (the
    token, revocation and authorization endpoints read forms, RFC 6749 §3.2) is refused
    before the SDK parses it: Starlette's form parser fails on a multipart body without
    a boundary."""

    async def handle(request: web.Request) -> web.StreamResponse:
        if form and request.method == "POST" and request.content_type != FORM:
            raise ApiError(415, f"This endpoint takes a {FORM} body")
        response = await serve_asgi(build(provider_for(request)), request)
        response.headers["Cache-Control"] = "no-store"
        if cors:
            response.headers.update(CORS)
        return response

    return handle


# The authorization endpoint is a page a browser is sent to, never called across origins.
_authorize = _served(lambda p: request_response(AuthorizationHandler(p).handle), cors=False)
token = _served(lambda p: request_response(TokenHandler(p, HashedClientAuthenticator(p)).handle))
_register = _served(
    lambda p: request_response(RegistrationHandler(p, REGISTRATION).handle), form=False
)
revoke = _served(
    lambda p: request_response(PublicRevocationHandler(p, HashedClientAuthenticator(p)).handle)
)


async def authorize(request: web.Request) -> web.StreamResponse:
    """The SDK's authorization endpoint. An error it sends back to the client names the
    issuer too (RFC 9207, advertised: a client that reads the flag refuses a response
    without it); a request it accepts goes on to the consent page, which names it there."""
    response = await _authorize(request)
    location = response.headers.get("Location")
    if location is not None and not location.startswith(public_base(request) + CONSENT_PATH):
        response.headers["Location"] = construct_redirect_uri(location, iss=public_base(request))
    return response


async def register(request: web.Request) -> web.StreamResponse:
    """Dynamic client registration, bounded (``service.oauth.registration``): the body's
    size before it is read or parsed, the client address's registrations this hour, the
    metadata's sizes and redirect URIs; then the SDK's handler."""
    limit = registration.MAX_BODY_BYTES
    too_large = ApiError(
        413, f"A registration body may be at most {limit // 1024} KiB", headers=dict(CORS)
    )
    if (request.content_length or 0) > limit:
        raise too_large
    await _count_registration(request)
    if len(await body_of(request)) > limit:  # sent without a Content-Length
        raise too_large
    try:
        registration.check_metadata(await body_of(request))
    except RegistrationError as e:
        refused = {"error": e.error, "error_description": e.error_description}
        return json_response(refused, status=400, headers={**CORS, **NO_STORE})
    return await _register(request)


async def _count_registration(request: web.Request) -> None:
    """Counted per address in PostgreSQL, so the limit holds across processes; over it, 429."""
    limit = request.app[SETTINGS].oauth_registrations_per_hour
    retry_after = await oauth.count_registration(request.app[POOL], client_address(request), limit)
    if retry_after is not None:
        raise ApiError(
            429,
            f"Over {limit} registrations an hour from this address; retry after {retry_after} s",
            headers={**CORS, "Retry-After": str(retry_after)},
            retry_after=retry_after,
        )


def client_address(request: web.Request) -> str:
    """Whom a registration is counted against: the peer's address, an IPv6 one's /64 (what
    one host is usually given)."""
    try:
        address = ipaddress.ip_address(request.remote or "")
    except ValueError:
        return request.remote or ""
    if not isinstance(address, ipaddress.IPv6Address):
        return str(address)
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(ipaddress.ip_network(f"{address}/64", strict=False))


# --- connected clients --------------------------------------------------------------------


def render_grant(g: oauth.Grant) -> dict[str, Any]:
    return {
        "id": g.id,
        "key_id": g.key_id,
        "client_id": g.client_id,
        "client_name": g.client_name,
        "redirect_hosts": g.redirect_hosts,
        "scopes": g.scopes,
        "store": g.store,
        "created_at": iso(g.created_at),
        "last_used_at": iso_or_none(g.last_used_at),
    }


def _own_key(request: web.Request) -> str | None:
    """Whose grants the caller may see: an admin key the workspace's, any other its own."""
    principal = principal_of(request)
    return None if "admin" in principal.scopes else principal.key_id


async def list_grants(request: web.Request) -> web.Response:
    principal = principal_of(request)
    grants = await oauth.list_grants(
        request.app[POOL], principal.workspace_id, key_id=_own_key(request)
    )
    return json_response({"data": [render_grant(g) for g in grants]})


async def revoke_grant(request: web.Request) -> web.Response:
    grant_id = request.match_info["grant_id"]
    revoked = await oauth.revoke_grant(
        request.app[POOL],
        grant_id,
        workspace=principal_of(request).workspace_id,
        key_id=_own_key(request),
    )
    if not revoked:
        raise NotFound(f"No connected client {grant_id!r} for this key")
    return web.Response(status=204)
