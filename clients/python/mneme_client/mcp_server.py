"""``mneme-mcp``: Mneme as an MCP server over stdio, for agents that speak the Model
Context Protocol (Claude Desktop and Code, Cursor, …). Install with
``pip install 'mneme-client[mcp]'``.

The tools are ``mneme_mcp_tools``' table, the one the service's own ``/mcp`` endpoint
serves too; here they reach the service through ``RestExecutor``: its public REST API,
with the key in ``MNEME_API_KEY``, so a tool can do what the key may do and nothing more.

``mneme-mcp`` is configured by the environment: ``MNEME_URL`` (default
``http://127.0.0.1:8080``), ``MNEME_API_KEY``, ``MNEME_STORE`` (the store a tool uses when
none is named; default ``default``).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Any, cast

from mneme_mcp_tools import CALLER, Caller, Json, Refused, build_server

from mneme_client._async import AsyncMneme
from mneme_client._call import Call, seg
from mneme_client._errors import MnemeError

MEMORIES = "/api/v1/memories"
STORES = "/api/v1/forward/memory_stores"
SEARCH = "/api/v1/memory/search"


def _json(body: Any) -> Json:
    return cast(Json, body)


class RestExecutor:
    """The tools' operations as calls of the REST API (``mneme_mcp_tools.Executor``),
    sent by the SDK's transport: its retries, timeouts and Idempotency-Keys."""

    def __init__(self, client: AsyncMneme) -> None:
        self._transport = client._t

    async def _send(
        self,
        method: str,
        path: str,
        *,
        json: Json | None = None,
        params: Mapping[str, str] | None = None,
        write: bool = False,
    ) -> Json:
        call = Call(method, path, _json, params=params, json=json, write=write)
        try:
            return await self._transport.send(call)
        except MnemeError as exc:
            raise Refused(exc.label or "error", exc.message, exc.status) from exc

    async def write_memory(self, memory: Json) -> Json:
        return await self._send("POST", MEMORIES, json=memory, write=True)

    async def search(self, request: Json) -> Json:
        return await self._send("POST", SEARCH, json=request)

    async def browse(self, query: dict[str, str]) -> Json:
        return await self._send("GET", MEMORIES, params=query)

    async def delete_memory(self, memory_id: str) -> None:
        await self._send("DELETE", f"{MEMORIES}/{seg(memory_id)}", write=True)

    async def list_files(self, store: str, query: dict[str, str]) -> Json:
        return await self._send("GET", f"{STORES}/{seg(store)}/memories", params=query)

    async def read_file(self, store: str, memory_id: str) -> Json:
        return await self._send("GET", f"{STORES}/{seg(store)}/memories/{seg(memory_id)}")

    async def create_file(self, store: str, file: Json) -> Json:
        return await self._send("POST", f"{STORES}/{seg(store)}/memories", json=file, write=True)

    async def update_file(self, store: str, memory_id: str, change: Json) -> Json:
        path = f"{STORES}/{seg(store)}/memories/{seg(memory_id)}"
        return await self._send("POST", path, json=change, write=True)


def main() -> None:
    """The ``mneme-mcp`` console script: the server on stdin/stdout."""
    # stdout is the protocol; httpx's line per request would only crowd the client's log.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if not os.environ.get("MNEME_API_KEY"):  # a line for the person, not a traceback
        sys.exit("mneme-mcp: set MNEME_API_KEY to a Mneme API key (`mneme keys create`)")
    client = AsyncMneme(os.environ.get("MNEME_API_KEY"), os.environ.get("MNEME_URL"))
    CALLER.set(Caller(RestExecutor(client), os.environ.get("MNEME_STORE") or "default"))
    build_server().run("stdio")


if __name__ == "__main__":
    main()
