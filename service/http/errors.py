"""The HTTP form of every error, and the one JSON shape it takes.

``ApiError`` carries a status, a kind and a message (plus optional fields such as
``valid`` or ``param``). The engine raises the domain's refusals (``service.problems``);
``api_error_of`` alone maps them to a status. ``render_error`` is the only place that
builds an error body; the error middleware in ``service.http.middleware`` routes the
domain's refusals, aiohttp's own 404/405/413 and unexpected exceptions through it too.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from service.http.json import json_response
from service.problems import Conflict, Forbidden, Invalid, NotFound, Problem, Unavailable

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


# The domain's refusals (service.problems), as the HTTP API answers them.
STATUS_OF_PROBLEM: dict[type[Problem], int] = {
    Invalid: 400,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    Unavailable: 503,
}


def api_error_of(problem: Problem) -> ApiError:
    """The HTTP form of a domain refusal: its status, kind, message and details."""
    status = next(s for t, s in STATUS_OF_PROBLEM.items() if isinstance(problem, t))
    headers = {}
    if isinstance(problem, Unavailable):
        headers["Retry-After"] = str(problem.retry_after)
    return ApiError(status, problem.message, headers=headers, **problem.details)


def unauthorized(message: str) -> ApiError:
    """A 401 with the scheme to answer it in (RFC 6750), which MCP clients and other
    bearer-token clients read."""
    return ApiError(401, message, headers={"WWW-Authenticate": 'Bearer realm="mneme"'})


def render_error(error: ApiError) -> web.Response:
    body: dict[str, Any] = {"type": error.kind, "message": error.message}
    body.update(error.extra)
    return json_response(
        {"type": "error", "error": body}, status=error.status, headers=error.headers
    )
