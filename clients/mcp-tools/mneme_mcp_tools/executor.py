"""How the tools reach Mneme: an ``Executor``, one method per operation of Mneme's public
API that a tool uses, each taking and returning that operation's JSON objects (the
REST API's bodies and query parameters, exactly as the API documents them).

Two doors implement it: the REST client (``mneme-mcp``, a local process talking to a
remote service) and the service's engine (``/mcp``, in-process, for the caller's key).
Either way a refusal is a ``Refused`` carrying the API's status, error type and message,
and changes nothing.
"""

from __future__ import annotations

from typing import Any, Protocol

Json = dict[str, Any]


class Refused(Exception):
    """The API's refusal: ``label`` is its status and error type (``404 not_found_error``;
    ``connection_error`` when no answer came back), ``status`` the status alone."""

    def __init__(self, label: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{label}: {message}")
        self.label = label
        self.message = message
        self.status = status


class Executor(Protocol):
    """The operations the tools call, for one caller."""

    async def write_memory(self, memory: Json) -> Json:
        """``POST /api/v1/memories`` with one memory: the memory as written."""
        ...

    async def search(self, request: Json) -> Json:
        """``POST /api/v1/memory/search``: the whole answer."""
        ...

    async def browse(self, query: dict[str, str]) -> Json:
        """``GET /api/v1/memories`` with these query parameters: one browse window."""
        ...

    async def delete_memory(self, memory_id: str) -> None:
        """``DELETE /api/v1/memories/{memory_id}``."""
        ...

    async def list_files(self, store: str, query: dict[str, str]) -> Json:
        """``GET /api/v1/forward/memory_stores/{store}/memories``: one page, by path."""
        ...

    async def read_file(self, store: str, memory_id: str) -> Json:
        """``GET /api/v1/forward/memory_stores/{store}/memories/{memory_id}``."""
        ...

    async def create_file(self, store: str, file: Json) -> Json:
        """``POST /api/v1/forward/memory_stores/{store}/memories``."""
        ...

    async def update_file(self, store: str, memory_id: str, change: Json) -> Json:
        """``POST /api/v1/forward/memory_stores/{store}/memories/{memory_id}``."""
        ...
