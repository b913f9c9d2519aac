"""Why the engine refuses what it was asked: the domain's errors, with no HTTP in them.

The write and search paths (``service.write``, ``service.retrieval``) and the value rules
raise these; the HTTP shell alone turns them into statuses and the §3 error shape
(``service.http.errors.api_error_of``), and the MCP door into tool errors. ``message`` is
for the caller (a batch prefixes the item it concerns); ``details`` are extra fields the
error object carries (``param``, ``valid``).
"""

from __future__ import annotations

from typing import Any


class Problem(Exception):
    """A request the service refuses, and why, in words the caller can act on."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def labelled(self, label: str) -> Problem:
        """The same refusal, its message naming the item it concerns (``memories[3]: …``)."""
        if label:
            self.message = f"{label}: {self.message}"
        return self


class Invalid(Problem):
    """A value the rules refuse: a malformed or out-of-range field."""


class Forbidden(Problem):
    """The caller's key may not do this (a scope it cannot write, a missing permission)."""


def missing_scope(scope: str) -> Forbidden:
    """The refusal of a key without ``scope``, at any door."""
    return Forbidden(f"This API key lacks the '{scope}' scope")


class NotFound(Problem):
    """Nothing the caller can read goes by that name or id."""


class Conflict(Problem):
    """It contradicts what is stored: a taken path or identity, a stale sha256."""


class Unavailable(Problem):
    """Not now: a part of the service is still starting; retry after ``retry_after`` s."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after
