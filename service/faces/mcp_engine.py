"""The MCP door's executor: the tools' operations (``mneme_mcp_tools.Executor``) as calls
into the engine, in-process, for the caller of the ``/mcp`` request that carries them.

Each operation is the one the REST API's face runs for the same request (the same
parsing of the same JSON, the same engine call, the same rendering), so the readability
rule, scopes, validation and metering cannot differ between doors; what differs is that
nothing goes over the network: a tool call is one request, counted once against the rate
limit (the ``/mcp`` request's own), and a ``recall`` once in usage. Scopes are checked
here, per operation, as the access middleware checks them per route; refusals are the
API's status, type and message (``Refused``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Concatenate, ParamSpec, TypeVar

import msgspec
from aiohttp import web
from mneme_mcp_tools import Json, Refused
from multidict import MultiDict

from service.app_keys import PLANNED_ONCE_POOL, READ_POOL
from service.decoding import decode_json
from service.faces import browse, stores
from service.faces.memories import delete_one, write_pools, written_object
from service.faces.search.handler import search_deps, search_early, with_warnings
from service.faces.search.request import parse_request
from service.http.errors import ApiError, api_error_of
from service.http.middleware import principal_of, unexpected_error
from service.http.route import READ, WRITE
from service.problems import Invalid, Problem, missing_scope
from service.queries.keys import Principal
from service.retrieval.memory_models import pick_model
from service.write import engine, items, rules

P = ParamSpec("P")
T = TypeVar("T")
Operation = Callable[Concatenate[web.Application, Principal, P], Awaitable[T]]


def refused(error: ApiError) -> Refused:
    return Refused(f"{error.status} {error.kind}", error.message, error.status)


def _encoded(value: Json) -> bytes:
    """A tool's JSON arguments as the bytes a REST body would carry."""
    try:
        return msgspec.json.encode(value)
    except UnicodeEncodeError:
        raise Invalid("Text must be valid Unicode (no lone surrogates)") from None


class EngineExecutor:
    """The tools' operations for the caller of ``request`` (a ``POST /mcp``)."""

    def __init__(self, request: web.Request) -> None:
        self._request = request
        self._principal = principal_of(request)

    async def _run(
        self, scope: str, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """``operation`` for the caller, who needs ``scope``; what it refuses, or an
        exception no face would have turned into an answer, as the API would answer."""
        try:
            if scope not in self._principal.scopes:
                raise missing_scope(scope)
            return await operation(self._request.app, self._principal, *args, **kwargs)
        except Problem as exc:
            raise refused(api_error_of(exc)) from exc
        except ApiError as exc:
            raise refused(exc) from exc
        except Exception as exc:
            raise refused(unexpected_error(self._request, exc)) from exc

    async def write_memory(self, memory: Json) -> Json:
        return await self._run(WRITE, _write_memory, memory)

    async def search(self, request: Json) -> Json:
        return await self._run(READ, _search, request)

    async def browse(self, query: dict[str, str]) -> Json:
        return await self._run(READ, _browse, query)

    async def delete_memory(self, memory_id: str) -> None:
        await self._run(WRITE, _delete_memory, memory_id)

    async def list_files(self, store: str, query: dict[str, str]) -> Json:
        return await self._run(READ, stores.list_path_memories, store, query)

    async def read_file(self, store: str, memory_id: str) -> Json:
        return await self._run(READ, stores.read_path_memory, store, memory_id)

    async def create_file(self, store: str, file: Json) -> Json:
        return await self._run(WRITE, _create_file, store, file)

    async def update_file(self, store: str, memory_id: str, change: Json) -> Json:
        return await self._run(WRITE, _update_file, store, memory_id, change)


async def _write_memory(app: web.Application, principal: Principal, memory: Json) -> Json:
    """``POST /api/v1/memories`` with one memory and no Idempotency-Key."""
    batch = items.decode_items(_encoded(memory))
    [written] = await engine.apply(write_pools(app), rules.WriteContext(principal), batch)
    return written_object(principal, written, batch.items[0])


async def _search(app: web.Application, principal: Principal, request: Json) -> Json:
    """``POST /api/v1/memory/search`` for the default memory model."""
    model = pick_model(None)
    req = parse_request(_encoded(request), model, None)
    answer = await search_early(search_deps(app), principal, model, req)
    found: Json = msgspec.json.decode(with_warnings(answer.body, req.warnings))
    return found


async def _browse(app: web.Application, principal: Principal, query: dict[str, str]) -> Json:
    return await browse.window_of(app[READ_POOL], principal, MultiDict(query))


async def _delete_memory(app: web.Application, principal: Principal, memory_id: str) -> None:
    await delete_one(app[PLANNED_ONCE_POOL], principal, memory_id)


async def _create_file(app: web.Application, principal: Principal, store: str, file: Json) -> Json:
    body = decode_json(_encoded(file), stores.PathMemoryCreate)
    return await stores.create_path_memory(app, principal, store, body)


async def _update_file(
    app: web.Application, principal: Principal, store: str, memory_id: str, change: Json
) -> Json:
    body = decode_json(_encoded(change), stores.PathMemoryUpdate)
    return await stores.update_path_memory(app, principal, store, memory_id, body)
