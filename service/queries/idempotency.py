"""Idempotency keys of writes: the first response, replayed for 24 hours.

A request with an ``Idempotency-Key`` takes a transaction-scoped advisory lock on
(workspace, key) first, so a retry that races the original waits for it and then sees
its stored response instead of writing again.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from service.queries import Conn

TTL = "24 hours"

LOCK = "SELECT pg_advisory_xact_lock(hashtextextended($1 || E'\\x1f' || $2, 1))"

SELECT = f"""
SELECT request_sha256, status, response FROM idempotency_keys
WHERE workspace_id = $1 AND key = $2 AND created_at > now() - interval '{TTL}'
"""

SAVE = """
INSERT INTO idempotency_keys (workspace_id, key, request_sha256, status, response)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (workspace_id, key) DO UPDATE
SET request_sha256 = EXCLUDED.request_sha256, status = EXCLUDED.status,
    response = EXCLUDED.response, created_at = now()
"""

PRUNE = f"DELETE FROM idempotency_keys WHERE created_at < now() - interval '{TTL}'"


@dataclass(frozen=True)
class Stored:
    request_sha256: bytes
    status: int
    response: bytes


async def lock_and_get(conn: asyncpg.Connection, workspace_id: str, key: str) -> Stored | None:
    await conn.execute(LOCK, workspace_id, key)
    row = await conn.fetchrow(SELECT, workspace_id, key)
    if row is None:
        return None
    return Stored(bytes(row["request_sha256"]), row["status"], bytes(row["response"]))


async def save(
    conn: asyncpg.Connection,
    workspace_id: str,
    key: str,
    request_sha256: bytes,
    status: int,
    response: bytes,
) -> None:
    await conn.execute(SAVE, workspace_id, key, request_sha256, status, response)


async def prune(conn: Conn) -> None:
    await conn.execute(PRUNE)
