"""Erasures face (``admin`` scope): erase everything about one person."""

from __future__ import annotations

import msgspec
from aiohttp import web

from service.app_keys import POOL
from service.http.inputs import read_body
from service.http.json import json_response
from service.http.middleware import principal_of
from service.write import erasure


class ErasureIn(msgspec.Struct, forbid_unknown_fields=True):
    member: str | None = None
    speaker: str | None = None
    store: str | None = None


async def create_erasure(request: web.Request) -> web.Response:
    """``{"member": id}`` or ``{"speaker": name, "store": id or name}`` → what was erased."""
    body = await read_body(request, ErasureIn)
    target = erasure.Target(member=body.member, speaker=body.speaker, store=body.store)
    erased = await erasure.erase(request.app[POOL], principal_of(request).workspace_id, target)
    return json_response(erasure.erased_object(erased))
