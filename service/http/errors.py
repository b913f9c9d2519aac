"""The one error type and the one JSON shape every error takes.

``ApiError`` carries a status, a kind and a message (plus optional fields such as
``valid`` or ``param``). ``render_error`` is the only place that builds an error body;
the error middleware in ``service.http.middleware`` routes aiohttp's own 404/405/413 and
unexpected exceptions through it too.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from service.http.json import json_response

KIND_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    406: "invalid_request_error",
    408: "invalid_request_error",
    409: "conflict_error",
    413: "request_too_large",
    415: "invalid_request_error",
    431: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",
}


class ApiError(Exception):
    """An error to be shown to the client, with its HTTP status and kind."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str | None = None,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind or KIND_BY_STATUS.get(status, "api_error")
        self.message = message
        self.headers = headers or {}
        self.extra = extra


def bad_request(message: str, **extra: Any) -> ApiError:
    return ApiError(400, message, **extra)


def not_found(message: str) -> ApiError:
    return ApiError(404, message)


def conflict(message: str, **extra: Any) -> ApiError:
    return ApiError(409, message, **extra)


def forbidden(message: str) -> ApiError:
    return ApiError(403, message)


def unauthorized(message: str) -> ApiError:
    return ApiError(401, message)


def render_error(error: ApiError) -> web.Response:
    body: dict[str, Any] = {"type": error.kind, "message": error.message}
    body.update(error.extra)
    return json_response(
        {"type": "error", "error": body}, status=error.status, headers=error.headers
    )
