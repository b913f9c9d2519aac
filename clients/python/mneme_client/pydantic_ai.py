"""Mneme's memory as Pydantic AI tools: ``mneme_toolset``.

``pip install "mneme-client[pydantic-ai]"``. ``Agent(model, toolsets=[mneme_toolset()])``
gives the agent ``remember`` and ``recall`` (and, with ``files=True``, the store's
path-addressed files: ``list_files``, ``read_file``, ``write_file``), each one call to
Mneme on the async client with the toolset's key. A refusal the model can fix (an
unknown file, a bad argument, a stale write) comes back to it as ``ModelRetry`` with
Mneme's message; a key that is refused or lacks a scope raises the SDK's typed error.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

from pydantic_ai import FunctionToolset, ModelRetry

from mneme_client import _tools
from mneme_client._async import AsyncMneme
from mneme_client._errors import ConflictError, InvalidRequestError, NotFoundError

P = ParamSpec("P")
T = TypeVar("T")
FIXABLE = (NotFoundError, InvalidRequestError, ConflictError)


def _retry_on_fixable(tool: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """``tool``, with a refusal the model can fix turned into ``ModelRetry``; its
    signature and docstring (the tool's schema) are ``tool``'s (``functools.wraps``)."""

    @functools.wraps(tool)
    async def wrapped(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await tool(*args, **kwargs)
        except FIXABLE as exc:
            raise ModelRetry(str(exc)) from exc

    return wrapped


def mneme_toolset(
    store: str = "default",
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    files: bool = False,
    scope: str | None = None,
) -> FunctionToolset[Any]:
    """Tools over one Mneme store. ``api_key`` / ``base_url`` default to ``MNEME_API_KEY``
    / ``MNEME_URL``; ``scope`` is given to what ``remember`` writes (``workspace`` unless
    set)."""
    client = AsyncMneme(api_key, base_url)

    async def remember(text: str) -> dict[str, str]:
        """Remember a fact, preference or event for later conversations.

        Args:
            text: the fact, in one self-contained sentence.
        """
        memory = await _tools.remember(client, store, scope, text)
        return {"id": memory.id, "text": memory.text}

    async def recall(query: str, max_results: int = 5) -> list[dict[str, Any]]:
        """Recall what was remembered that bears on a question, best first.

        Args:
            query: the question or topic, in words.
            max_results: how many memories to return (5-20).
        """
        return await _tools.recall(client, store, query, max_results)

    tools: list[Callable[..., Awaitable[Any]]] = [remember, recall]
    if files:
        tools += _file_tools(client, store)
    return FunctionToolset([_retry_on_fixable(t) for t in tools])


def _file_tools(client: AsyncMneme, store: str) -> list[Callable[..., Awaitable[Any]]]:
    async def find(path: str) -> str | None:
        async for memory in client.stores.list_memories(store, path, limit=1):
            return memory.id if memory.path == path else None
        return None

    async def list_files(path_prefix: str = "") -> list[str]:
        """The paths of the store's files, in order.

        Args:
            path_prefix: only paths starting with this.
        """
        return [m.path async for m in client.stores.list_memories(store, path_prefix or None)]

    async def read_file(path: str) -> str:
        """A file's content.

        Args:
            path: the file's path, e.g. notes/alice.md.
        """
        memory_id = await find(path)
        if memory_id is None:
            raise ModelRetry(f"No file at {path!r}; list_files shows what there is")
        return (await client.stores.read(store, memory_id)).content or ""

    async def write_file(path: str, content: str) -> str:
        """Create a file, or replace its content.

        Args:
            path: the file's path, e.g. notes/alice.md.
            content: the whole new content.
        """
        memory_id = await find(path)
        if memory_id is None:
            await client.stores.write(store, path, content)
        else:
            await client.stores.update(store, memory_id, content)
        return f"wrote {path}"

    return [list_files, read_file, write_file]
