"""Admin face: members, rooms and API keys of the caller's workspace (``admin`` scope)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from aiohttp import web

from service.app_keys import POOL
from service.http.inputs import read_body
from service.http.json import json_response
from service.http.middleware import principal_of
from service.ids import is_name
from service.problems import Conflict, Invalid, NotFound
from service.queries import keys, tenancy
from service.times import iso, iso_or_none


class MemberIn(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    kind: Literal["human", "agent"]
    name: str | None = None


class RoomIn(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    members: list[str] = msgspec.field(default_factory=list)


class KeyIn(msgspec.Struct, forbid_unknown_fields=True):
    kind: Literal["personal", "service"]
    scopes: list[str]
    member: str | None = None
    name: str | None = None


def check_name(value: str, what: str) -> str:
    if not is_name(value):
        raise Invalid(
            f"Invalid {what} {value!r}: 1-64 characters of A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit"
        )
    return value


def check_scopes(scopes: list[str]) -> list[str]:
    if not scopes:
        raise Invalid("scopes must name at least one scope", valid=list(keys.SCOPES))
    unknown = [s for s in scopes if s not in keys.SCOPES]
    if unknown:
        raise Invalid(
            f"Unknown scope(s): {', '.join(unknown)}", valid=list(keys.SCOPES), param="scopes"
        )
    return [s for s in keys.SCOPES if s in scopes]  # canonical order, no repeats


def render_member(m: tenancy.Member) -> dict[str, Any]:
    return {"id": m.id, "kind": m.kind, "name": m.name, "created_at": iso(m.created_at)}


def render_room(r: tenancy.Room) -> dict[str, Any]:
    return {"id": r.id, "members": r.members, "created_at": iso(r.created_at)}


def render_key(k: keys.ApiKey) -> dict[str, Any]:
    return {
        "id": k.id,
        "kind": k.kind,
        "member": k.member,
        "scopes": k.scopes,
        "name": k.name,
        "created_at": iso(k.created_at),
        "revoked_at": iso_or_none(k.revoked_at),
    }


# --- members ------------------------------------------------------------------------------


async def create_member(request: web.Request) -> web.Response:
    body = await read_body(request, MemberIn)
    check_name(body.id, "member id")
    workspace = principal_of(request).workspace_id
    member = await tenancy.create_member(
        request.app[POOL], workspace, body.id, body.kind, body.name
    )
    if member is None:
        raise Conflict(f"Member {body.id!r} already exists")
    return json_response(render_member(member), status=201)


async def list_members(request: web.Request) -> web.Response:
    members = await tenancy.list_members(request.app[POOL], principal_of(request).workspace_id)
    return json_response({"data": [render_member(m) for m in members]})


# --- rooms --------------------------------------------------------------------------------


async def create_room(request: web.Request) -> web.Response:
    body = await read_body(request, RoomIn)
    check_name(body.id, "room id")
    for member in body.members:
        check_name(member, "member id")
    workspace = principal_of(request).workspace_id
    async with request.app[POOL].acquire() as conn:
        room = await tenancy.create_room(conn, workspace, body.id, sorted(set(body.members)))
    if room is None:
        raise Conflict(f"Room {body.id!r} already exists")
    return json_response(render_room(room), status=201)


async def list_rooms(request: web.Request) -> web.Response:
    rooms = await tenancy.list_rooms(request.app[POOL], principal_of(request).workspace_id)
    return json_response({"data": [render_room(r) for r in rooms]})


async def add_room_member(request: web.Request) -> web.Response:
    room_id = request.match_info["room_id"]
    member_id = check_name(request.match_info["member_id"], "member id")
    workspace = principal_of(request).workspace_id
    async with request.app[POOL].acquire() as conn:
        room = await tenancy.add_room_member(conn, workspace, room_id, member_id)
    if room is None:
        raise NotFound(f"Room {room_id!r} not found")
    return json_response(render_room(room))


async def remove_room_member(request: web.Request) -> web.Response:
    room_id = request.match_info["room_id"]
    member_id = check_name(request.match_info["member_id"], "member id")
    workspace = principal_of(request).workspace_id
    async with request.app[POOL].acquire() as conn:
        room = await tenancy.remove_room_member(conn, workspace, room_id, member_id)
    if room is None:
        raise NotFound(f"Room {room_id!r} not found")
    return json_response(render_room(room))


# --- keys ---------------------------------------------------------------------------------


async def create_key(request: web.Request) -> web.Response:
    body = await read_body(request, KeyIn)
    scopes = check_scopes(body.scopes)
    workspace = principal_of(request).workspace_id
    pool = request.app[POOL]
    if body.kind == "service" and body.member is not None:
        raise Invalid("A service key is workspace-wide: it takes no member", param="member")
    if body.kind == "personal":
        if body.member is None:
            raise Invalid("A personal key needs the member it acts for", param="member")
        if await tenancy.get_member(pool, workspace, body.member) is None:
            raise NotFound(f"Member {body.member!r} not found")
    key, secret = await keys.create_key(
        pool, workspace, kind=body.kind, member=body.member, scopes=scopes, name=body.name
    )
    return json_response({"key": secret, **render_key(key)}, status=201)


async def list_keys(request: web.Request) -> web.Response:
    found = await keys.list_keys(request.app[POOL], principal_of(request).workspace_id)
    return json_response({"data": [render_key(k) for k in found]})


async def revoke_key(request: web.Request) -> web.Response:
    key_id = request.match_info["key_id"]
    if not await keys.revoke_key(request.app[POOL], principal_of(request).workspace_id, key_id):
        raise NotFound(f"API key {key_id!r} not found")
    return web.Response(status=204)
