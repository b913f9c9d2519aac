"""Erasures face (``admin`` scope): erase everything about one person."""

from __future__ import annotations

import msgspec
from aiohttp import web

from service.app_keys import POOL, SNAPSHOTS
from service.http.inputs import read_body
from service.http.json import json_response
from service.http.middleware import principal_of
from service.problems import Forbidden
from service.write import erasure


class ErasureIn(msgspec.Struct, forbid_unknown_fields=True):
    member: str | None = None
    speaker: str | None = None
    store: str | None = None


async def create_erasure(request: web.Request) -> web.Response:
    """``{"member": id}`` or ``{"speaker": name, "store": id or name}`` → what was erased."""
    principal = principal_of(request)
    if not principal.is_service:
        # An erasure reaches every memory of the workspace, and its counts say how many:
        # only a key that reads the whole workspace may make one.
        raise Forbidden("An erasure reaches the whole workspace: use a service key (admin)")
    body = await read_body(request, ErasureIn)
    target = erasure.Target(member=body.member, speaker=body.speaker, store=body.store)
    erased = await erasure.erase(request.app[POOL], principal.workspace_id, target)
    # Not one search more with the erased text in this process's memory; other processes
    # drop theirs when they see the store versions the erasure stamped (Snapshots.sweep).
    request.app[SNAPSHOTS].drop_workspace(principal.workspace_id)
    return json_response(erasure.erased_object(erased))
