"""Idempotency keys of writes: the first response, replayed for 24 hours.

A record belongs to the API key that made it: the same ``Idempotency-Key`` sent with
another API key is a new request, checked like any other (a replay must never hand one
key's response, or skip its permission checks, to another). A request with an
``Idempotency-Key`` takes a transaction-scoped advisory lock on (workspace, API key,
key) first, so a retry that races the original waits for it and then sees its stored
response instead of writing again.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from service.queries import Conn
from service.queries.keys import Principal

TTL = "24 hours"

LOCK = """
SELECT pg_advisory_xact_lock(hashtextextended($1 || E'\\x1f' || $2 || E'\\x1f' || $3, 1))
"""

SELECT = f"""
SELECT request_sha256, status, response FROM idempotency_keys
WHERE workspace_id = $1 AND api_key_id = $2 AND key = $3
  AND created_at > now() - interval '{TTL}'
"""

SAVE = """
INSERT INTO idempotency_keys (workspace_id, api_key_id, key, request_sha256, status, response)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (workspace_id, api_key_id, key) DO UPDATE
SET request_sha256 = EXCLUDED.request_sha256, status = EXCLUDED.status,
    response = EXCLUDED.response, created_at = now()
"""

PRUNE = f"DELETE FROM idempotency_keys WHERE created_at < now() - interval '{TTL}'"


@dataclass(frozen=True)
class Stored:
    request_sha256: bytes
    status: int
    response: bytes


async def lock_and_get(conn: asyncpg.Connection, principal: Principal, key: str) -> Stored | None:
    """The stored response of this API key's request with ``key``, after locking it."""
    await conn.execute(LOCK, principal.workspace_id, principal.key_id, key)
    row = await conn.fetchrow(SELECT, principal.workspace_id, principal.key_id, key)
    if row is None:
        return None
    return Stored(bytes(row["request_sha256"]), row["status"], bytes(row["response"]))


async def save(
    conn: asyncpg.Connection,
    principal: Principal,
    key: str,
    request_sha256: bytes,
    status: int,
    response: bytes,
) -> None:
    await conn.execute(
        SAVE, principal.workspace_id, principal.key_id, key, request_sha256, status, response
    )


async def prune(conn: Conn) -> None:
    await conn.execute(PRUNE)
