"""Mneme's MCP tools, and ``mneme-mcp``: Mneme as an MCP server over stdio, for agents
that speak the Model Context Protocol (Claude Desktop and Code, Cursor, …). Install with
``pip install 'mneme-client[mcp]'``.

The tool table (``build_server``) is the one both transports serve: ``mneme-mcp`` here,
and the service's own ``/mcp`` endpoint (Streamable HTTP, ``service.faces.mcp``), which
builds it with a ``Caller`` per HTTP request. Every tool calls the service's public API
with the caller's key, so it can do what the key may do and nothing more; a refusal comes
back as a tool error with the service's own message, and changes nothing.

``mneme-mcp`` is configured by the environment: ``MNEME_URL`` (default
``http://127.0.0.1:8080``), ``MNEME_API_KEY``, ``MNEME_STORE`` (the store a tool uses when
none is named; default ``default``).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from mneme_client import _memories
from mneme_client._async import AsyncMneme
from mneme_client._call import Call, Page
from mneme_client._errors import ConflictError, MnemeError
from mneme_client._fields import BrowseFilters
from mneme_client._types import Hit, Memory, StoreMemory

T = TypeVar("T")

# How many browse windows (requests) one browse tool call reads at most.
BROWSE_WINDOWS = 5

INSTRUCTIONS = """\
Long-term memory. `remember` what you learn that will matter later (one fact per call, in
your own words); `recall` before you answer anything that past conversations may inform;
`forget` what is wrong. Files (`list_files`, `read_file`, `write_file`) are documents kept
at paths in a store, e.g. notes or a profile you maintain: read before you write, and pass
the sha256 you read as `expected_sha256` so you never overwrite a change you have not seen.
"""

# One line each, that an agent can act on.
DESCRIPTIONS = {
    "remember": (
        "Store a memory (one fact, in plain words) so it can be recalled later; returns its id."
    ),
    "recall": "Find the memories most relevant to a question, best first.",
    "browse": (
        "List the newest memories, most recently written first; with `search`, only those "
        "whose text contains it (any case)."
    ),
    "forget": "Delete a memory that is wrong or no longer true, by its id.",
    "list_files": "List the files of a store (paths and sha256, no content), by path.",
    "read_file": "Read a file of a store: its content and the sha256 to pass to write_file.",
    "write_file": (
        "Create or replace a file of a store; with expected_sha256 (from read_file), only if "
        "it still has that content, else nothing changes."
    ),
}

# What a client may assume of each tool: reading tools change nothing; forget destroys;
# calling forget, write_file (same content) or read-only tools twice does what once does.
READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
ANNOTATIONS = {
    "remember": ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                idempotent_hint=False, open_world_hint=False),
    "recall": READ_ONLY,
    "browse": READ_ONLY,
    "forget": ToolAnnotations(read_only_hint=False, destructive_hint=True,
                              idempotent_hint=True, open_world_hint=False),
    "list_files": READ_ONLY,
    "read_file": READ_ONLY,
    "write_file": ToolAnnotations(read_only_hint=False, destructive_hint=True,
                                  idempotent_hint=True, open_world_hint=False),
}  # fmt: skip


@dataclass(frozen=True)
class Caller:
    """Whom a tool call acts for: ``client`` carries the caller's key; ``store`` is the
    store a tool uses when none is named."""

    client: AsyncMneme
    store: str = "default"


# The caller of the tool call being run: set once by ``mneme-mcp``, per HTTP request by
# the service's /mcp (the tasks that run a call inherit it).
CALLER: ContextVar[Caller] = ContextVar("mneme_mcp_caller")

Store = Annotated[
    str | None, Field(description="Store name or id; the server's default store if omitted")
]
FileStore = Annotated[str, Field(description="Store name or id")]
Path = Annotated[str, Field(description="The file's path in the store, e.g. notes/todo.md")]


def _tool_error(exc: MnemeError, hint: str = "") -> ToolError:
    """The API's refusal as a tool error: its status, type and message (and a hint); no
    answer at all: ``connection_error`` and what went wrong."""
    return ToolError(f"{exc.label or 'error'}: {exc.message}{hint}")


async def _call(action: Awaitable[T]) -> T:
    """The API's answer, or its refusal as a tool error."""
    try:
        return await action
    except MnemeError as exc:
        raise _tool_error(exc) from exc


def _memory(m: Memory) -> dict[str, Any]:
    return {"id": m.id, "text": m.text, "store": m.store, "speaker": m.speaker,
            "fact_type": m.fact_type, "scope": m.scope}  # fmt: skip


def _browsed(m: Memory) -> dict[str, Any]:
    """A browse item: it carries no store or speaker (the browse face's object)."""
    return {"id": m.id, "text": m.text, "scope": m.scope, "fact_type": m.fact_type,
            "last_used_at": m.raw.get("lastUsedAt")}  # fmt: skip


def _hit(h: Hit) -> dict[str, Any]:
    return {"id": h.id, "content": h.content, "kind": h.kind, "similarity": h.similarity}


def _file(f: StoreMemory) -> dict[str, Any]:
    found = {"id": f.id, "path": f.path, "content_sha256": f.content_sha256}
    return found if f.content is None else {**found, "content": f.content}


def caller() -> Caller:
    """Whom the running tool call acts for (``CALLER``)."""
    try:
        return CALLER.get()
    except LookupError:  # a server built but not bound: a bug, never the agent's fault
        raise ToolError("500 api_error: no caller is bound to this MCP server") from None


async def file_at(client: AsyncMneme, store: str, path: str) -> StoreMemory | None:
    """The store's file at exactly ``path`` (listed by prefix, then matched)."""
    async for found in client.stores.list_memories(store, path_prefix=path):
        if found.path == path:
            return found
        if found.path > path:
            break
    return None


async def remember(
    text: Annotated[str, Field(description="The memory, e.g. 'Dave prefers squash merges'")],
    store: Store = None,
    speaker: Annotated[
        str | None, Field(description="Who said it: a registered speaker, or 'me' (you)")
    ] = None,
    fact_type: Annotated[
        str | None, Field(description="world, experience, opinion or observation")
    ] = None,
    scope: Annotated[
        str | None,
        Field(
            description="Who may read it: workspace (the default: every member), "
            "room:<roomId>, or pair:<humanId>:<agentId> (those two only)"
        ),
    ] = None,
    importance: Annotated[
        float | None, Field(ge=0, le=1, description="0-1; the default is 0.5")
    ] = None,
    event_date: Annotated[
        str | None, Field(description="When it happened, e.g. 2026-07-14 or 2026-07-14T15:05Z")
    ] = None,
    supersedes: Annotated[
        str | None, Field(description="The id (mem_…) of an older memory this one replaces")
    ] = None,
) -> dict[str, Any]:
    bound = caller()
    given = {
        "speaker": speaker, "fact_type": fact_type, "scope": scope, "importance": importance,
        "event_date": event_date, "supersedes": supersedes,
    }  # fmt: skip
    fields: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    fields["store"] = store or bound.store
    return _memory(await _call(bound.client.add(text, **fields)))


async def recall(
    query: Annotated[str, Field(description="What you want to know, as a question")],
    store: Store = None,
    max_results: Annotated[
        int | None, Field(ge=5, le=20, description="How many memories (5-20; default 10)")
    ] = None,
    verify: Annotated[
        int | None, Field(ge=0, le=3, description="Extra retrieval passes (slower, deeper)")
    ] = None,
    speaker: Annotated[
        str | None, Field(description="Only what this registered speaker said ('me': you)")
    ] = None,
    filters: Annotated[
        dict[str, Any] | None,
        Field(
            description='The search API\'s filters, e.g. {"scope": "room:eng", '
            '"event_after": "2026-01-01", "fact_type": ["world"]}: '
            "category, tier, fact_type, scope, entity, created_after, "
            "created_before, event_after, event_before, min_importance, "
            "include_superseded"
        ),
    ] = None,
) -> list[dict[str, Any]]:
    bound = caller()
    given = {"verify": verify, "speaker": speaker, "filters": filters}
    options: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    hits = await _call(bound.client.search(store or bound.store, query, max_results, **options))
    return [_hit(h) for h in hits]


async def browse(
    store: Store = None,
    search: Annotated[
        str | None, Field(description="Text the memories must contain (any case)")
    ] = None,
    fact_type: Annotated[
        str | None,
        Field(description="Only memories of this fact type (observations show only so)"),
    ] = None,
    limit: Annotated[int, Field(ge=1, le=200)] = 20,
) -> list[dict[str, Any]]:
    bound = caller()
    filters: BrowseFilters = {"store": store or bound.store}
    if search:
        filters["search"] = search
    if fact_type:
        filters["fact_type"] = fact_type
    # Each browse window holds the next memories by creation, its survivors sorted by
    # last use: take each window's newest first, window by window (BROWSE_WINDOWS at most,
    # each a request that counts towards the workspace's rate limit).
    page: Call[Page[Memory]] | None = _memories.browse(min(limit, 100), filters)
    found: list[Memory] = []
    for _ in range(BROWSE_WINDOWS):
        if page is None or len(found) >= limit:
            break
        window = await _call(bound.client._t.send(page))  # the SDK's own pages
        found += sorted(window.items, key=lambda m: m.id, reverse=True)[: limit - len(found)]
        page = window.next
    return [_browsed(m) for m in found]


async def forget(
    memory_id: Annotated[str, Field(description="The memory's id (mem_…)")],
) -> str:
    await _call(caller().client.delete(memory_id))
    return f"forgot {memory_id}"


async def list_files(
    store: FileStore,
    path_prefix: Annotated[str | None, Field(description="Only paths starting so")] = None,
    limit: Annotated[int, Field(ge=1, le=500, description="At most this many files")] = 200,
) -> list[dict[str, Any]]:
    client = caller().client
    listed: list[dict[str, Any]] = []
    try:  # pages of 100: at most five requests
        async for f in client.stores.list_memories(store, path_prefix, limit=min(limit, 100)):
            listed.append(_file(f))
            if len(listed) == limit:
                break
    except MnemeError as exc:
        raise _tool_error(exc) from exc
    return listed


async def read_file(store: FileStore, path: Path) -> dict[str, Any]:
    client = caller().client
    found = await _call(file_at(client, store, path))
    if found is None:
        raise ToolError(f"404 not_found_error: no file at {path!r} in store {store!r}")
    return _file(await _call(client.stores.read(store, found.id)))


async def write_file(
    store: FileStore,
    path: Path,
    content: str,
    expected_sha256: Annotated[
        str | None, Field(description="The sha256 read_file returned; omit to overwrite")
    ] = None,
) -> dict[str, Any]:
    client = caller().client
    found = await _call(file_at(client, store, path))
    if found is None:
        if expected_sha256 is not None:
            raise ToolError(
                f"409 conflict_error: no file at {path!r} any more (expected sha256 "
                f"{expected_sha256}); nothing was written"
            )
        return _file(await _call(client.stores.write(store, path, content)))
    try:
        updated = await client.stores.update(
            store, found.id, content=content, content_sha256=expected_sha256
        )
    except ConflictError as exc:  # changed since it was read
        hint = "; nothing was written. Read the file again, then write with its current sha256."
        raise _tool_error(exc, hint) from exc
    except MnemeError as exc:  # deleted meanwhile, too large, not allowed, …
        raise _tool_error(exc) from exc
    return _file(updated)


TOOLS: list[Callable[..., Awaitable[Any]]] = [
    remember, recall, browse, forget, list_files, read_file, write_file,
]  # fmt: skip


def build_server() -> MCPServer:
    """The MCP server with Mneme's tools; each call acts for ``CALLER`` (set it first)."""
    server = MCPServer("mneme", instructions=INSTRUCTIONS)
    for tool in TOOLS:
        name = tool.__name__
        server.add_tool(tool, name, description=DESCRIPTIONS[name], annotations=ANNOTATIONS[name])
    return server


def main() -> None:
    """The ``mneme-mcp`` console script: the server on stdin/stdout."""
    # stdout is the protocol; httpx's line per request would only crowd the client's log.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if not os.environ.get("MNEME_API_KEY"):  # a line for the person, not a traceback
        sys.exit("mneme-mcp: set MNEME_API_KEY to a Mneme API key (`mneme keys create`)")
    client = AsyncMneme(os.environ.get("MNEME_API_KEY"), os.environ.get("MNEME_URL"))
    CALLER.set(Caller(client, os.environ.get("MNEME_STORE") or "default"))
    build_server().run("stdio")


if __name__ == "__main__":
    main()
