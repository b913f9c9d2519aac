"""The SDK's exceptions: ``MnemeError`` and one subclass per kind of error answer."""

from __future__ import annotations

import json


class MnemeError(Exception):
    """Any failure. ``status`` is the HTTP status (``None`` when no answer came back),
    ``type`` the error kind the service named, ``request_id`` its ``request-id`` header."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        type: str | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.request_id = request_id

    @property
    def label(self) -> str:
        """``404 not_found_error``, ``connection_error``: what is known of the failure."""
        return " ".join(str(p) for p in (self.status, self.type) if p is not None)

    def __str__(self) -> str:
        tail = f" (request {self.request_id})" if self.request_id else ""
        return f"{self.label}: {self.message}{tail}" if self.label else self.message + tail


class InvalidRequestError(MnemeError):
    """400, and every other 4xx not listed below: the request itself is wrong."""


class AuthenticationError(MnemeError):
    """401: missing, unknown or revoked API key."""


class PermissionDeniedError(MnemeError):
    """403: the key lacks a scope, or the memory model cannot serve an option."""


class NotFoundError(MnemeError):
    """404: no such thing, or not readable by this key."""


class ConflictError(MnemeError):
    """409: a precondition, a taken path or name, a reused Idempotency-Key."""


class RateLimitError(MnemeError):
    """429: the workspace's requests per minute are used up (retried first)."""


class APIError(MnemeError):
    """5xx: the service failed or is unavailable (503s are retried first)."""


_BY_STATUS: dict[int, type[MnemeError]] = {
    400: InvalidRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    429: RateLimitError,
}


def error_for(status: int, content: bytes, request_id: str | None) -> MnemeError:
    """The exception for an error answer: ``{"type": "error", "error": {type, message}}``,
    or whatever text a proxy in between sent."""
    kind, message = None, content.decode("utf-8", "replace")[:500] or f"HTTP {status}"
    try:
        error = json.loads(content)["error"]
        kind, message = str(error["type"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        pass
    cls = _BY_STATUS.get(status) or (APIError if status >= 500 else InvalidRequestError)
    return cls(message, status=status, type=kind, request_id=request_id)
