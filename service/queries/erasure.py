"""Erasure of a person: every memory about them, and every copy of it, for good.

A speaker of one store, or a member of the workspace. What goes: the memories (their
versions, chunks and vectors, images and last-used stamps with them, by foreign key),
every cached search answer of the workspace, the idempotency replays that hold any of
them, what receivers answered to their webhook deliveries, the search
statistics' terms they alone had (folded at once, not left as +1/-1 deltas), and the
speaker's registration. Webhooks are told ``memory.deleted`` (the outbox trigger). Usage
rows keep their counts: they hold no text.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from service.queries import search_stats
from service.queries.named import NamedSQL


@dataclass(frozen=True)
class Erased:
    memories: int
    versions: int
    chunks: int
    images: int
    cached_answers: int
    replays: int
    speakers: int


# A member's memories: naming them as speaker (by id or name, in any case), in a pair
# scope of theirs, or written (created or changed) by one of their keys.
MEMBER_MEMORIES = NamedSQL("""
SELECT m.id FROM memories m
WHERE m.workspace_id = :workspace
  AND (lower(m.speaker) = ANY (:names::text[])
       OR (m.scope LIKE 'pair:%'
           AND :member IN (split_part(m.scope, ':', 2), split_part(m.scope, ':', 3)))
       OR m.id IN (SELECT v.memory_id FROM memory_versions v
                   JOIN api_keys k ON k.workspace_id = v.workspace_id AND k.id = v.actor
                   WHERE v.workspace_id = :workspace AND k.member_id = :member
                     AND v.operation IN ('created', 'modified')))
FOR UPDATE OF m
""")

SPEAKER_MEMORIES = NamedSQL("""
SELECT id FROM memories
WHERE workspace_id = :workspace AND store_id = :store AND lower(speaker) = lower(:speaker)
FOR UPDATE
""")

MEMBER_NAMES = NamedSQL("""
-- 'me' is the agent itself, never a person's name.
SELECT array_remove(array_remove(ARRAY[lower(id), lower(name)], NULL), 'me') AS names
FROM members
WHERE workspace_id = :workspace AND id = :member
""")

# Counted as of the statement's start (every part of it reads the same snapshot), so the
# versions and chunks the memories' deletion takes with it are counted too.
ERASE = NamedSQL("""
WITH versions AS (
    SELECT count(*) AS n FROM memory_versions
    WHERE workspace_id = :workspace AND memory_id = ANY (:ids::text[])
), chunks AS (
    SELECT count(*) AS n FROM memory_chunks
    WHERE workspace_id = :workspace AND memory_id = ANY (:ids::text[])
), answers AS (
    -- Every cached answer of the workspace: those that hold the memories, one a search
    -- that read them may still be writing, and the person's own queries. A cache only.
    DELETE FROM search_cache WHERE workspace_id = :workspace
    RETURNING 1
), echoes AS (
    -- A receiver's answer kept with a failed delivery may echo the memory it was sent.
    UPDATE webhook_deliveries d SET last_error = 'erased'
    FROM webhook_events e
    WHERE e.workspace_id = :workspace AND e.memory_id = ANY (:ids::text[])
      AND d.workspace_id = e.workspace_id AND d.event_id = e.id AND d.last_error IS NOT NULL
), replays AS (
    DELETE FROM idempotency_keys WHERE workspace_id = :workspace AND memory_ids && :ids::text[]
    RETURNING 1
), gone AS (
    DELETE FROM memories WHERE workspace_id = :workspace AND id = ANY (:ids::text[])
    RETURNING store_id, kind
)
SELECT (SELECT count(*) FROM gone)::int AS memories,
       (SELECT count(*) FROM gone WHERE kind = 'image')::int AS images,
       (SELECT n FROM versions)::int AS versions,
       (SELECT n FROM chunks)::int AS chunks,
       (SELECT count(*) FROM answers)::int AS cached_answers,
       (SELECT count(*) FROM replays)::int AS replays,
       ARRAY(SELECT DISTINCT store_id FROM gone) AS stores
""")

FORGET_SPEAKERS = NamedSQL("""
DELETE FROM speakers
WHERE workspace_id = :workspace AND (:store::text IS NULL OR store_id = :store)
  AND lower(name) = ANY (:names::text[])
""")


async def erase_member(conn: asyncpg.Connection, workspace_id: str, member: str) -> Erased | None:
    """Erase a member, in the caller's transaction; ``None`` if there is no such member."""
    names: list[str] | None = await MEMBER_NAMES.fetchval(
        conn, workspace=workspace_id, member=member
    )
    if names is None:
        return None
    rows = await MEMBER_MEMORIES.fetch(conn, workspace=workspace_id, names=names, member=member)
    return await _erase(conn, workspace_id, [r["id"] for r in rows], None, names)


async def erase_speaker(
    conn: asyncpg.Connection, workspace_id: str, store_id: str, speaker: str
) -> Erased:
    """Erase a speaker of one store, in the caller's transaction."""
    rows = await SPEAKER_MEMORIES.fetch(
        conn, workspace=workspace_id, store=store_id, speaker=speaker
    )
    return await _erase(conn, workspace_id, [r["id"] for r in rows], store_id, [speaker.lower()])


async def _erase(
    conn: asyncpg.Connection,
    workspace_id: str,
    ids: list[str],
    store_id: str | None,
    speaker_names: list[str],
) -> Erased:
    row = await ERASE.fetchrow(conn, workspace=workspace_id, ids=ids)
    assert row is not None
    for store in row["stores"]:
        await search_stats.compact_store(conn, workspace_id, store)
    forgot = await FORGET_SPEAKERS.execute(
        conn, workspace=workspace_id, store=store_id, names=speaker_names
    )
    return Erased(
        memories=row["memories"],
        versions=row["versions"],
        chunks=row["chunks"],
        images=row["images"],
        cached_answers=row["cached_answers"],
        replays=row["replays"],
        speakers=int(forgot.split()[-1]),
    )
