"""Mneme's MCP tools: one definition (names, arguments, descriptions, annotations) that
both doors serve, ``mneme-mcp`` over stdio and the service's ``/mcp`` over Streamable
HTTP. Each call acts for ``CALLER``: its executor (``mneme_mcp_tools.executor``) reaches
Mneme with the caller's key, so a tool can do what the key may do and nothing more; a
refusal comes back as a tool error with the service's own message, and changes nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from mneme_mcp_tools.executor import Executor, Json, Refused

T = TypeVar("T")

# How many browse windows (requests) one browse tool call reads at most.
BROWSE_WINDOWS = 5
# What recall asks for when the agent does not say (the search API's SDK default).
DEFAULT_MAX_RESULTS = 10
FILES_PAGE = 100

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


def _changes(*, destructive: bool, idempotent: bool) -> ToolAnnotations:
    return ToolAnnotations(
        read_only_hint=False,
        destructive_hint=destructive,
        idempotent_hint=idempotent,
        open_world_hint=False,
    )


# What a client may assume of each tool: reading tools change nothing; forget destroys;
# calling forget, write_file (same content) or read-only tools twice does what once does.
READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
ANNOTATIONS = {
    "remember": _changes(destructive=False, idempotent=False),
    "recall": READ_ONLY,
    "browse": READ_ONLY,
    "forget": _changes(destructive=True, idempotent=True),
    "list_files": READ_ONLY,
    "read_file": READ_ONLY,
    "write_file": _changes(destructive=True, idempotent=True),
}


@dataclass(frozen=True)
class Caller:
    """Whom a tool call acts for: ``executor`` reaches Mneme with the caller's key;
    ``store`` is the store a tool uses when none is named."""

    executor: Executor
    store: str = "default"


# The caller of the tool call being run: set once by ``mneme-mcp``, per HTTP request by
# the service's /mcp (the tasks that run a call inherit it).
CALLER: ContextVar[Caller] = ContextVar("mneme_mcp_caller")

Store = Annotated[
    str | None, Field(description="Store name or id; the server's default store if omitted")
]
FileStore = Annotated[str, Field(description="Store name or id")]
Path = Annotated[str, Field(description="The file's path in the store, e.g. notes/todo.md")]


def caller() -> Caller:
    """Whom the running tool call acts for (``CALLER``)."""
    try:
        return CALLER.get()
    except LookupError:  # a server built but not bound: a bug, never the agent's fault
        raise ToolError("500 api_error: no caller is bound to this MCP server") from None


def _tool_error(exc: Refused, hint: str = "") -> ToolError:
    """The API's refusal as a tool error: its status, type and message (and a hint)."""
    return ToolError(f"{exc.label}: {exc.message}{hint}")


async def _call(action: Awaitable[T]) -> T:
    """The API's answer, or its refusal as a tool error."""
    try:
        return await action
    except Refused as exc:
        raise _tool_error(exc) from exc


def _given(**values: Any) -> dict[str, Any]:
    """The values that were given (not ``None``), under their names."""
    return {name: value for name, value in values.items() if value is not None}


def _memory(m: Json) -> dict[str, Any]:
    """A written memory (the write API's object, camelCase) as the tool returns it. A key
    that may not read gets only a receipt (the id and what it sent), so any field may be
    absent: null then."""
    return {
        "id": m["id"],
        "text": m.get("text"),
        "store": m.get("store"),
        "speaker": m.get("speaker"),
        "fact_type": m.get("factType"),
        "scope": m.get("scope"),
    }


def _browsed(m: Json) -> dict[str, Any]:
    """A browse item: it carries no store or speaker (the browse face's object)."""
    return {
        "id": m["id"],
        "text": m["text"],
        "scope": m["scope"],
        "fact_type": m.get("factType"),
        "last_used_at": m.get("lastUsedAt"),
    }


def _hits(answer: Json) -> list[dict[str, Any]]:
    """A search answer's memories, then the agent's own words, then images; no id twice."""
    seen: set[str] = set()
    hits = []
    for key, kind in (("memories", "memory"), ("self_memories", "self"), ("images", "image")):
        for h in answer.get(key) or []:
            if h["id"] not in seen:
                seen.add(h["id"])
                hits.append(
                    {
                        "id": h["id"],
                        "content": h["content"],
                        "kind": kind,
                        "similarity": float(h["similarity"]),
                    }
                )
    return hits


def _file(f: Json) -> dict[str, Any]:
    found = {"id": f["id"], "path": f.get("path"), "content_sha256": f.get("content_sha256")}
    return found if f.get("content") is None else {**found, "content": f["content"]}


async def _files(
    executor: Executor, store: str, path_prefix: str | None, page: int
) -> AsyncIterator[Json]:
    """A store's files by path, page by page (each page a request)."""
    query = {"limit": str(page), **_given(path_prefix=path_prefix)}
    while True:
        listed = await executor.list_files(store, query)
        for f in listed["data"]:
            yield f
        if not (listed["has_more"] and listed["last_id"]):
            return
        query = {**query, "after_id": listed["last_id"]}


async def file_at(executor: Executor, store: str, path: str) -> Json | None:
    """The store's file at exactly ``path`` (listed by prefix, then matched)."""
    async for found in _files(executor, store, path, FILES_PAGE):
        if found["path"] == path:
            return found
        if found["path"] > path:
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
    memory = {
        "text": text,
        "store": store or bound.store,
        **_given(speaker=speaker, factType=fact_type, scope=scope, importance=importance,
                 eventDate=event_date, supersedes=supersedes),
    }  # fmt: skip
    return _memory(await _call(bound.executor.write_memory(memory)))


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
    request = {
        "user_id": store or bound.store,
        "query": query,
        "max_results": DEFAULT_MAX_RESULTS if max_results is None else max_results,
        **_given(verify=verify, speaker=speaker, filters=filters),
    }
    return _hits(await _call(bound.executor.search(request)))


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
    query = {
        "store": store or bound.store,
        "limit": str(min(limit, 100)),
        **_given(search=search or None, factType=fact_type or None),
    }
    # Each browse window holds the next memories by creation, its survivors sorted by
    # last use: take each window's newest first, window by window (BROWSE_WINDOWS at most).
    found: list[Json] = []
    for _ in range(BROWSE_WINDOWS):
        window = await _call(bound.executor.browse(query))
        found += sorted(window["data"], key=lambda m: m["id"], reverse=True)[: limit - len(found)]
        if len(found) >= limit or not (window.get("hasMore") and window.get("cursor")):
            break
        query = {**query, "cursor": window["cursor"]}
    return [_browsed(m) for m in found]


async def forget(
    memory_id: Annotated[str, Field(description="The memory's id (mem_…)")],
) -> str:
    await _call(caller().executor.delete_memory(memory_id))
    return f"forgot {memory_id}"


async def list_files(
    store: FileStore,
    path_prefix: Annotated[str | None, Field(description="Only paths starting so")] = None,
    limit: Annotated[int, Field(ge=1, le=500, description="At most this many files")] = 200,
) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = []
    try:  # pages of 100: at most five requests
        async for f in _files(caller().executor, store, path_prefix, min(limit, FILES_PAGE)):
            listed.append(_file(f))
            if len(listed) == limit:
                break
    except Refused as exc:
        raise _tool_error(exc) from exc
    return listed


async def read_file(store: FileStore, path: Path) -> dict[str, Any]:
    executor = caller().executor
    found = await _call(file_at(executor, store, path))
    if found is None:
        raise ToolError(f"404 not_found_error: no file at {path!r} in store {store!r}")
    return _file(await _call(executor.read_file(store, found["id"])))


async def write_file(
    store: FileStore,
    path: Path,
    content: str,
    expected_sha256: Annotated[
        str | None, Field(description="The sha256 read_file returned; omit to overwrite")
    ] = None,
) -> dict[str, Any]:
    executor = caller().executor
    found = await _call(file_at(executor, store, path))
    if found is None:
        if expected_sha256 is not None:
            raise ToolError(
                f"409 conflict_error: no file at {path!r} any more (expected sha256 "
                f"{expected_sha256}); nothing was written"
            )
        return _file(await _call(executor.create_file(store, {"path": path, "content": content})))
    change = {"content": content, **_given(content_sha256=expected_sha256)}
    try:
        return _file(await executor.update_file(store, found["id"], change))
    except Refused as exc:
        # Changed since it was read: say what to do. Deleted meanwhile, too large, not
        # allowed, …: the refusal alone.
        stale = exc.status == 409
        hint = "; nothing was written. Read the file again, then write with its current sha256."
        raise _tool_error(exc, hint if stale else "") from exc


TOOLS: list[Callable[..., Awaitable[Any]]] = [
    remember,
    recall,
    browse,
    forget,
    list_files,
    read_file,
    write_file,
]


def build_server() -> MCPServer:
    """The MCP server with Mneme's tools; each call acts for ``CALLER`` (set it first)."""
    server = MCPServer("mneme", instructions=INSTRUCTIONS)
    for tool in TOOLS:
        name = tool.__name__
        server.add_tool(tool, name, description=DESCRIPTIONS[name], annotations=ANNOTATIONS[name])
    return server
