"""Workspaces, members and rooms: the SQL and the typed functions that run it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from service.ids import new_id
from service.queries import Conn


@dataclass(frozen=True)
class Workspace:
    id: str
    name: str
    tier: str
    created_at: datetime


@dataclass(frozen=True)
class Member:
    id: str
    kind: str
    name: str | None
    created_at: datetime


@dataclass(frozen=True)
class Room:
    id: str
    members: list[str]
    created_at: datetime


# --- workspaces ---------------------------------------------------------------------------

INSERT_WORKSPACE = """
INSERT INTO workspaces (id, name, tier) VALUES ($1, $2, $3)
ON CONFLICT DO NOTHING
RETURNING id, name, tier, created_at
"""

# Every workspace has a store named "default".
INSERT_DEFAULT_STORE = """
INSERT INTO stores (workspace_id, id, name, description) VALUES ($1, $2, 'default', 'Default store')
ON CONFLICT DO NOTHING
"""


async def create_workspace(conn: asyncpg.Connection, name: str, tier: str) -> Workspace | None:
    """A new workspace with its ``default`` store; ``None`` if the name is taken."""
    async with conn.transaction():
        row = await conn.fetchrow(INSERT_WORKSPACE, new_id("ws"), name, tier)
        if row is None:
            return None
        await conn.execute(INSERT_DEFAULT_STORE, row["id"], new_id("memstore"))
    return Workspace(**row)


SELECT_WORKSPACE_BY_NAME = """
SELECT id, name, tier, created_at FROM workspaces WHERE lower(name) = lower($1)
"""


async def workspace_by_name(conn: Conn, name: str) -> Workspace | None:
    row = await conn.fetchrow(SELECT_WORKSPACE_BY_NAME, name)
    return None if row is None else Workspace(**row)


SELECT_WORKSPACES = "SELECT id, name, tier, created_at FROM workspaces ORDER BY created_at, id"


async def list_workspaces(conn: Conn) -> list[Workspace]:
    return [Workspace(**r) for r in await conn.fetch(SELECT_WORKSPACES)]


UPDATE_WORKSPACE_TIER = """
UPDATE workspaces SET tier = $2 WHERE id = $1 RETURNING id, name, tier, created_at
"""


async def set_workspace_tier(conn: Conn, workspace_id: str, tier: str) -> Workspace | None:
    row = await conn.fetchrow(UPDATE_WORKSPACE_TIER, workspace_id, tier)
    return None if row is None else Workspace(**row)


# --- members ------------------------------------------------------------------------------

INSERT_MEMBER = """
INSERT INTO members (workspace_id, id, kind, name) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING
RETURNING id, kind, name, created_at
"""


async def create_member(
    conn: Conn, workspace_id: str, member_id: str, kind: str, name: str | None
) -> Member | None:
    """``None`` when the id is taken."""
    row = await conn.fetchrow(INSERT_MEMBER, workspace_id, member_id, kind, name)
    return None if row is None else Member(**row)


SELECT_MEMBERS = """
SELECT id, kind, name, created_at FROM members WHERE workspace_id = $1 ORDER BY id
"""


async def list_members(conn: Conn, workspace_id: str) -> list[Member]:
    return [Member(**r) for r in await conn.fetch(SELECT_MEMBERS, workspace_id)]


SELECT_MEMBER = """
SELECT id, kind, name, created_at FROM members WHERE workspace_id = $1 AND id = $2
"""


async def get_member(conn: Conn, workspace_id: str, member_id: str) -> Member | None:
    row = await conn.fetchrow(SELECT_MEMBER, workspace_id, member_id)
    return None if row is None else Member(**row)


# --- rooms --------------------------------------------------------------------------------

ROOM_COLUMNS = """
r.id,
coalesce((SELECT array_agg(rm.member_id ORDER BY rm.member_id) FROM room_members rm
          WHERE rm.workspace_id = r.workspace_id AND rm.room_id = r.id), '{}') AS members,
r.created_at
"""

SELECT_ROOM = f"SELECT {ROOM_COLUMNS} FROM rooms r WHERE r.workspace_id = $1 AND r.id = $2"

SELECT_ROOMS = f"SELECT {ROOM_COLUMNS} FROM rooms r WHERE r.workspace_id = $1 ORDER BY r.id"

INSERT_ROOM = """
INSERT INTO rooms (workspace_id, id) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING id
"""

INSERT_ROOM_MEMBERS = """
INSERT INTO room_members (workspace_id, room_id, member_id)
SELECT $1, $2, m FROM unnest($3::text[]) AS m
ON CONFLICT DO NOTHING
"""

DELETE_ROOM_MEMBER = """
DELETE FROM room_members WHERE workspace_id = $1 AND room_id = $2 AND member_id = $3
"""


async def get_room(conn: Conn, workspace_id: str, room_id: str) -> Room | None:
    row = await conn.fetchrow(SELECT_ROOM, workspace_id, room_id)
    return None if row is None else Room(**row)


async def list_rooms(conn: Conn, workspace_id: str) -> list[Room]:
    return [Room(**r) for r in await conn.fetch(SELECT_ROOMS, workspace_id)]


async def create_room(
    conn: asyncpg.Connection, workspace_id: str, room_id: str, members: list[str]
) -> Room | None:
    """``None`` when the id is taken."""
    async with conn.transaction():
        if await conn.fetchval(INSERT_ROOM, workspace_id, room_id) is None:
            return None
        await conn.execute(INSERT_ROOM_MEMBERS, workspace_id, room_id, members)
        return await get_room(conn, workspace_id, room_id)


async def add_room_member(
    conn: asyncpg.Connection, workspace_id: str, room_id: str, member_id: str
) -> Room | None:
    """Idempotent; ``None`` when the room does not exist."""
    async with conn.transaction():
        if await get_room(conn, workspace_id, room_id) is None:
            return None
        await conn.execute(INSERT_ROOM_MEMBERS, workspace_id, room_id, [member_id])
        return await get_room(conn, workspace_id, room_id)


async def remove_room_member(
    conn: asyncpg.Connection, workspace_id: str, room_id: str, member_id: str
) -> Room | None:
    """Idempotent; ``None`` when the room does not exist."""
    async with conn.transaction():
        await conn.execute(DELETE_ROOM_MEMBER, workspace_id, room_id, member_id)
        return await get_room(conn, workspace_id, room_id)
