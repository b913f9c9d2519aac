"""Workspaces, members and rooms: the SQL and the typed functions that run it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from service.ids import new_id
from service.queries import Conn
from service.queries.named import NamedSQL


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

INSERT_WORKSPACE = NamedSQL("""
INSERT INTO workspaces (id, name, tier) VALUES (:id, :name, :tier)
ON CONFLICT DO NOTHING
RETURNING id, name, tier, created_at
""")

# Every workspace has a store named "default".
INSERT_DEFAULT_STORE = NamedSQL("""
INSERT INTO stores (workspace_id, id, name, description)
VALUES (:workspace, :id, 'default', 'Default store')
ON CONFLICT DO NOTHING
""")


async def create_workspace(conn: asyncpg.Connection, name: str, tier: str) -> Workspace | None:
    """A new workspace with its ``default`` store; ``None`` if the name is taken."""
    async with conn.transaction():
        row = await INSERT_WORKSPACE.fetchrow(conn, id=new_id("ws"), name=name, tier=tier)
        if row is None:
            return None
        await INSERT_DEFAULT_STORE.execute(conn, workspace=row["id"], id=new_id("memstore"))
    return Workspace(**row)


SELECT_WORKSPACE_BY_NAME = NamedSQL("""
SELECT id, name, tier, created_at FROM workspaces WHERE lower(name) = lower(:name)
""")


async def workspace_by_name(conn: Conn, name: str) -> Workspace | None:
    row = await SELECT_WORKSPACE_BY_NAME.fetchrow(conn, name=name)
    return None if row is None else Workspace(**row)


SELECT_WORKSPACES = NamedSQL(
    "SELECT id, name, tier, created_at FROM workspaces ORDER BY created_at, id"
)


async def list_workspaces(conn: Conn) -> list[Workspace]:
    return [Workspace(**r) for r in await SELECT_WORKSPACES.fetch(conn)]


UPDATE_WORKSPACE_TIER = NamedSQL("""
UPDATE workspaces SET tier = :tier WHERE id = :id RETURNING id, name, tier, created_at
""")


async def set_workspace_tier(conn: Conn, workspace_id: str, tier: str) -> Workspace | None:
    row = await UPDATE_WORKSPACE_TIER.fetchrow(conn, id=workspace_id, tier=tier)
    return None if row is None else Workspace(**row)


# --- members ------------------------------------------------------------------------------

INSERT_MEMBER = NamedSQL("""
INSERT INTO members (workspace_id, id, kind, name) VALUES (:workspace, :id, :kind, :name)
ON CONFLICT DO NOTHING
RETURNING id, kind, name, created_at
""")


async def create_member(
    conn: Conn, workspace_id: str, member_id: str, kind: str, name: str | None
) -> Member | None:
    """``None`` when the id is taken."""
    row = await INSERT_MEMBER.fetchrow(
        conn, workspace=workspace_id, id=member_id, kind=kind, name=name
    )
    return None if row is None else Member(**row)


SELECT_MEMBERS = NamedSQL("""
SELECT id, kind, name, created_at FROM members WHERE workspace_id = :workspace ORDER BY id
""")


async def list_members(conn: Conn, workspace_id: str) -> list[Member]:
    return [Member(**r) for r in await SELECT_MEMBERS.fetch(conn, workspace=workspace_id)]


SELECT_MEMBER = NamedSQL("""
SELECT id, kind, name, created_at FROM members WHERE workspace_id = :workspace AND id = :id
""")


async def get_member(conn: Conn, workspace_id: str, member_id: str) -> Member | None:
    row = await SELECT_MEMBER.fetchrow(conn, workspace=workspace_id, id=member_id)
    return None if row is None else Member(**row)


# --- rooms --------------------------------------------------------------------------------

ROOM_COLUMNS = """
r.id,
coalesce((SELECT array_agg(rm.member_id ORDER BY rm.member_id) FROM room_members rm
          WHERE rm.workspace_id = r.workspace_id AND rm.room_id = r.id), '{}') AS members,
r.created_at
"""

SELECT_ROOM = NamedSQL(
    f"SELECT {ROOM_COLUMNS} FROM rooms r WHERE r.workspace_id = :workspace AND r.id = :room"
)

SELECT_ROOMS = NamedSQL(
    f"SELECT {ROOM_COLUMNS} FROM rooms r WHERE r.workspace_id = :workspace ORDER BY r.id"
)

INSERT_ROOM = NamedSQL("""
INSERT INTO rooms (workspace_id, id) VALUES (:workspace, :room) ON CONFLICT DO NOTHING
RETURNING id
""")

INSERT_ROOM_MEMBERS = NamedSQL("""
INSERT INTO room_members (workspace_id, room_id, member_id)
SELECT :workspace, :room, m FROM unnest(:members::text[]) AS m
ON CONFLICT DO NOTHING
""")

DELETE_ROOM_MEMBER = NamedSQL("""
DELETE FROM room_members
WHERE workspace_id = :workspace AND room_id = :room AND member_id = :member
""")


async def get_room(conn: Conn, workspace_id: str, room_id: str) -> Room | None:
    row = await SELECT_ROOM.fetchrow(conn, workspace=workspace_id, room=room_id)
    return None if row is None else Room(**row)


async def list_rooms(conn: Conn, workspace_id: str) -> list[Room]:
    return [Room(**r) for r in await SELECT_ROOMS.fetch(conn, workspace=workspace_id)]


async def create_room(
    conn: asyncpg.Connection, workspace_id: str, room_id: str, members: list[str]
) -> Room | None:
    """``None`` when the id is taken."""
    async with conn.transaction():
        if await INSERT_ROOM.fetchval(conn, workspace=workspace_id, room=room_id) is None:
            return None
        await INSERT_ROOM_MEMBERS.execute(
            conn, workspace=workspace_id, room=room_id, members=members
        )
        return await get_room(conn, workspace_id, room_id)


async def add_room_member(
    conn: asyncpg.Connection, workspace_id: str, room_id: str, member_id: str
) -> Room | None:
    """Idempotent; ``None`` when the room does not exist."""
    async with conn.transaction():
        if await get_room(conn, workspace_id, room_id) is None:
            return None
        await INSERT_ROOM_MEMBERS.execute(
            conn, workspace=workspace_id, room=room_id, members=[member_id]
        )
        return await get_room(conn, workspace_id, room_id)


async def remove_room_member(
    conn: asyncpg.Connection, workspace_id: str, room_id: str, member_id: str
) -> Room | None:
    """Idempotent; ``None`` when the room does not exist."""
    async with conn.transaction():
        await DELETE_ROOM_MEMBER.execute(
            conn, workspace=workspace_id, room=room_id, member=member_id
        )
        return await get_room(conn, workspace_id, room_id)
