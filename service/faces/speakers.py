"""Speakers of a store (SPEC §3.1): who a memory may be attributed to. ``me`` always exists."""

from __future__ import annotations

import msgspec
from aiohttp import web

from service.app_keys import POOL, SETTINGS
from service.http.inputs import read_body
from service.http.json import json_response
from service.http.middleware import principal_of
from service.problems import Conflict, NotFound
from service.queries import memories
from service.times import iso
from service.write.fields import check_speaker_name, speakers_full


class SpeakerIn(msgspec.Struct, forbid_unknown_fields=True):
    name: str


async def _store(request: web.Request) -> memories.Store:
    ref = request.match_info["store"]
    store = await memories.resolve_store(request.app[POOL], principal_of(request).workspace_id, ref)
    if store is None:
        raise NotFound(f"Store {ref!r} not found")
    return store


async def list_speakers(request: web.Request) -> web.Response:
    store = await _store(request)
    found = await memories.list_speakers(
        request.app[POOL], principal_of(request).workspace_id, store.id
    )
    return json_response({"data": [{"name": n, "created_at": iso(t)} for n, t in found]})


async def add_speaker(request: web.Request) -> web.Response:
    body = await read_body(request, SpeakerIn)
    name = check_speaker_name(body.name)
    store = await _store(request)
    if name == "me":
        raise Conflict("Speaker 'me' (the agent itself) always exists")
    workspace = principal_of(request).workspace_id
    limit = request.app[SETTINGS].max_speakers_per_store
    added = await memories.add_speaker(request.app[POOL], workspace, store.id, name, limit=limit)
    if added.outcome == "no store":  # deleted since it was looked up
        raise NotFound(f"Store {store.id!r} not found")
    if added.outcome == "exists":
        raise Conflict(f"Speaker {name!r} is already registered in store {store.name!r}")
    if added.outcome == "full" or added.created_at is None:
        raise speakers_full(store.name, limit)
    return json_response({"name": name, "created_at": iso(added.created_at)}, status=201)


async def delete_speaker(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    store = await _store(request)
    if name == "me":  # a conflict with what always exists, as adding it again is
        raise Conflict("Speaker 'me' (the agent itself) always exists and cannot be removed")
    workspace = principal_of(request).workspace_id
    if not await memories.delete_speaker(request.app[POOL], workspace, store.id, name):
        raise NotFound(f"Speaker {name!r} is not registered in store {store.name!r}")
    return web.Response(status=204)
