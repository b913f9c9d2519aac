"""The revocation endpoint (RFC 7009) for public clients too.

The SDK's ``RevocationHandler`` validates the form with a model whose ``client_secret``
is required (``str | None`` with no default), so a public client (``none``), which has
no secret to send, is refused with 400. This is the SDK's handler with that one field
optional; the rest (client authentication, which token, revoking only a client's own)
is the SDK's own code path.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

from mcp.server.auth.errors import stringify_pydantic_error
from mcp.server.auth.handlers.revoke import (
    RevocationErrorResponse,
    RevocationHandler,
    RevocationRequest,
)
from mcp.server.auth.json_response import PydanticJSONResponse
from mcp.server.auth.middleware.client_auth import AuthenticationError
from mcp.server.auth.provider import AccessToken, RefreshToken
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response

NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


class PublicRevocationRequest(RevocationRequest):
    client_secret: str | None = None


class PublicRevocationHandler(RevocationHandler):
    async def handle(self, request: Request) -> Response:
        try:
            client = await self.client_authenticator.authenticate_request(request)
        except AuthenticationError as e:
            error = RevocationErrorResponse(
                error="unauthorized_client", error_description=e.message
            )
            return PydanticJSONResponse(status_code=401, content=error)
        try:
            revocation = PublicRevocationRequest.model_validate(dict(await request.form()))
        except ValidationError as e:
            error = RevocationErrorResponse(
                error="invalid_request", error_description=stringify_pydantic_error(e)
            )
            return PydanticJSONResponse(status_code=400, content=error)
        Load = Callable[[str], Awaitable[AccessToken | RefreshToken | None]]
        loaders: list[Load] = [
            self.provider.load_access_token,
            partial(self.provider.load_refresh_token, client),
        ]
        if revocation.token_type_hint == "refresh_token":  # noqa: S105 - a hint's name
            loaders.reverse()
        token: AccessToken | RefreshToken | None = None
        for load in loaders:
            if (token := await load(revocation.token)) is not None:
                break
        # An unknown token, or another client's, is answered 200 as well (RFC 7009 §2.2).
        if token is not None and token.client_id == client.client_id:
            await self.provider.revoke_token(token)
        return Response(status_code=200, headers=NO_STORE)
