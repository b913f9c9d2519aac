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

from service.queries import Conn, memories
from service.queries.keys import Principal
from service.queries.named import NamedSQL

TTL = "24 hours"

LOCK = NamedSQL("""
SELECT pg_advisory_xact_lock(
    hashtextextended(:workspace || E'\\x1f' || :api_key || E'\\x1f' || :key, 1))
""")

SELECT = NamedSQL(f"""
SELECT request_sha256, status, response, memory_ids FROM idempotency_keys
WHERE workspace_id = :workspace AND api_key_id = :api_key AND key = :key
  AND created_at > now() - interval '{TTL}'
""")

SAVE = NamedSQL("""
INSERT INTO idempotency_keys (workspace_id, api_key_id, key, request_sha256, status, response,
                              memory_ids)
VALUES (:workspace, :api_key, :key, :request_sha256, :status, :response, :memory_ids)
ON CONFLICT (workspace_id, api_key_id, key) DO UPDATE
SET request_sha256 = EXCLUDED.request_sha256, status = EXCLUDED.status,
    response = EXCLUDED.response, memory_ids = EXCLUDED.memory_ids, created_at = now()
""")

PRUNE = NamedSQL(f"DELETE FROM idempotency_keys WHERE created_at < now() - interval '{TTL}'")

# How many of a stored answer's memories the caller may read now (a purged one: none).
READABLE = NamedSQL("""
SELECT count(*) FROM memories
WHERE workspace_id = :workspace AND id = ANY(:ids::text[])
  AND mneme_readable(scope, :is_service, :member, :rooms)
""")


@dataclass(frozen=True)
class Stored:
    request_sha256: bytes
    status: int
    response: bytes
    memory_ids: list[str]


async def lock_and_get(conn: asyncpg.Connection, principal: Principal, key: str) -> Stored | None:
    """The stored response of this API key's request with ``key``, after locking it."""
    who = {"workspace": principal.workspace_id, "api_key": principal.key_id, "key": key}
    await LOCK.execute(conn, **who)
    row = await SELECT.fetchrow(conn, **who)
    if row is None:
        return None
    return Stored(
        bytes(row["request_sha256"]), row["status"], bytes(row["response"]), row["memory_ids"]
    )


async def replayable(conn: Conn, principal: Principal, stored: Stored) -> bool:
    """Whether the caller may still read every memory the stored answer holds (SPEC §9: a
    replay is an exit like any other; a memory purged or moved out of reach since is not
    handed out again)."""
    if not stored.memory_ids:  # a record from before 0018: nothing to check it against
        return True
    readable = await READABLE.fetchval(
        conn, ids=stored.memory_ids, **memories.readable_by(principal)
    )
    return bool(readable == len(set(stored.memory_ids)))


async def save(
    conn: asyncpg.Connection,
    principal: Principal,
    key: str,
    request_sha256: bytes,
    status: int,
    response: bytes,
    memory_ids: list[str],
) -> None:
    await SAVE.execute(
        conn,
        workspace=principal.workspace_id,
        api_key=principal.key_id,
        key=key,
        request_sha256=request_sha256,
        status=status,
        response=response,
        memory_ids=memory_ids,
    )


async def prune(conn: Conn) -> None:
    await PRUNE.execute(conn)
