"""The whole HTTP surface, in one list.

``scope`` is what the calling key needs; ``None`` means no key (operational endpoints).
The access middleware reads it from here, and a test holds this list and the OpenAPI
document to the same set of operations.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from service.faces import admin, browse, memories, ops, speakers

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

READ, WRITE, ADMIN = "memory:read", "memory:write", "admin"


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Handler
    scope: str | None


ROUTES: list[Route] = [
    # Operations
    Route("GET", "/healthz", ops.healthz, None),
    Route("GET", "/readyz", ops.readyz, None),
    Route("GET", "/metrics", ops.metrics, None),
    Route("GET", "/openapi.json", ops.openapi, None),
    Route("GET", "/llms.txt", ops.llms_txt, None),
    Route("GET", "/", ops.page, None),
    Route("GET", "/static/{name}", ops.static_file, None),
    # Browse face (seed 000)
    Route("GET", "/api/v1/memories", browse.list_memories, READ),
    # Write API
    Route("POST", "/api/v1/memories", memories.create_memories, WRITE),
    Route("GET", "/api/v1/memories/{memory_id}", memories.get_memory, READ),
    Route("PATCH", "/api/v1/memories/{memory_id}", memories.patch_memory, WRITE),
    Route("DELETE", "/api/v1/memories/{memory_id}", memories.delete_memory, WRITE),
    Route("GET", "/api/v1/memories/{memory_id}/versions", memories.list_versions, READ),
    Route("GET", "/api/v1/memories/{memory_id}/media", memories.get_media, READ),
    Route("GET", "/api/v1/stores/{store}/speakers", speakers.list_speakers, READ),
    Route("POST", "/api/v1/stores/{store}/speakers", speakers.add_speaker, WRITE),
    Route("DELETE", "/api/v1/stores/{store}/speakers/{name}", speakers.delete_speaker, WRITE),
    # Admin: members, rooms, keys
    Route("POST", "/api/v1/members", admin.create_member, ADMIN),
    Route("GET", "/api/v1/members", admin.list_members, ADMIN),
    Route("POST", "/api/v1/rooms", admin.create_room, ADMIN),
    Route("GET", "/api/v1/rooms", admin.list_rooms, ADMIN),
    Route("PUT", "/api/v1/rooms/{room_id}/members/{member_id}", admin.add_room_member, ADMIN),
    Route("DELETE", "/api/v1/rooms/{room_id}/members/{member_id}", admin.remove_room_member, ADMIN),
    Route("POST", "/api/v1/keys", admin.create_key, ADMIN),
    Route("GET", "/api/v1/keys", admin.list_keys, ADMIN),
    Route("DELETE", "/api/v1/keys/{key_id}", admin.revoke_key, ADMIN),
]
