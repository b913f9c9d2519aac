"""Erasure of a person: every memory about them, and every copy of it, for good.

A speaker of one store, or a member of the workspace. What goes: the memories (their
versions, chunks and vectors, images and last-used stamps with them, by foreign key),
every cached search answer of the workspace, the idempotency replays that hold any of
them, what receivers answered to their webhook deliveries, the search
statistics' terms they alone had (folded at once, not left as +1/-1 deltas), and the
speaker's registration. Webhooks are told ``memory.deleted`` (the outbox trigger). Usage
rows keep their counts: they hold no text.

A member's edits of memories someone else wrote are taken out of them, not the memories:
``EDITED`` and ``HISTORY`` read what she changed, ``REDACT`` blanks what she wrote in the
audit trail, and ``FORGET_COPIES`` drops the copies that may hold it (the roll-back of
what is current is a write, by ``service.write.rules``).
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
# scope of theirs, or created by one of their keys. One that someone else created and she
# only changed stays theirs (``EDITED``).
MEMBER_MEMORIES = NamedSQL("""
SELECT m.id FROM memories m
WHERE m.workspace_id = :workspace
  AND (lower(m.speaker) = ANY (:names::text[])
       OR (m.scope LIKE 'pair:%'
           AND :member IN (split_part(m.scope, ':', 2), split_part(m.scope, ':', 3)))
       OR m.id IN (SELECT v.memory_id FROM memory_versions v
                   JOIN api_keys k ON k.workspace_id = v.workspace_id AND k.id = v.actor
                   WHERE v.workspace_id = :workspace AND k.member_id = :member
                     AND v.operation = 'created'))
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


async def member_memories(
    conn: asyncpg.Connection, workspace_id: str, member: str
) -> tuple[list[str], list[str]] | None:
    """A member's names (as a speaker is named) and her memories, locked; ``None`` if
    there is no such member."""
    names: list[str] | None = await MEMBER_NAMES.fetchval(
        conn, workspace=workspace_id, member=member
    )
    if names is None:
        return None
    rows = await MEMBER_MEMORIES.fetch(conn, workspace=workspace_id, names=names, member=member)
    return names, [r["id"] for r in rows]


async def erase_memories(
    conn: asyncpg.Connection, workspace_id: str, ids: list[str], names: list[str]
) -> Erased:
    """Erase a member's memories (``member_memories``) and every registration of her names,
    in the caller's transaction."""
    return await _erase(conn, workspace_id, ids, None, names)


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


# --- a member's edits of memories someone else wrote ------------------------------------------

# What a redacted version says instead of what she wrote, and who it says wrote it: not her
# key's id, which would still name her (the member and her keys outlive an erasure).
ERASED_TEXT = "[erased]"
ERASED_ACTOR = "erased member"


@dataclass(frozen=True)
class Step:
    """One version of a memory she edited, oldest first: whose it is and what it says."""

    id: str
    memory_id: str
    hers: bool  # written by one of her keys
    gone: bool  # redacted by an earlier erasure: what it says is no one's any more
    text: str | None
    metadata: dict[str, str] | None


@dataclass(frozen=True)
class Redaction:
    """What of one version goes: its text (and hash), its metadata, its actor."""

    version_id: str
    text: bool
    metadata: bool
    actor: bool


# Memories someone else wrote (not among hers) that one of her keys changed, locked.
EDITED = NamedSQL("""
SELECT m.id, m.text, m.metadata FROM memories m
WHERE m.workspace_id = :workspace AND NOT (m.id = ANY (:hers::text[]))
  AND m.id IN (SELECT v.memory_id FROM memory_versions v
               JOIN api_keys k ON k.workspace_id = v.workspace_id AND k.id = v.actor
               WHERE v.workspace_id = :workspace AND k.member_id = :member)
ORDER BY m.id
FOR UPDATE OF m
""")

# Their versions, oldest first (the order the versions list shows, reversed).
HISTORY = NamedSQL("""
SELECT v.id, v.memory_id, v.text, v.metadata, v.actor = :erased_actor AS gone,
       EXISTS (SELECT 1 FROM api_keys k
               WHERE k.workspace_id = v.workspace_id AND k.id = v.actor
                 AND k.member_id = :member) AS hers
FROM memory_versions v
WHERE v.workspace_id = :workspace AND v.memory_id = ANY (:ids::text[])
ORDER BY v.memory_id, v.id
""")

REDACT = NamedSQL("""
UPDATE memory_versions v
SET text = CASE WHEN r.text THEN :erased_text ELSE v.text END,
    content_sha256 = CASE WHEN r.text THEN NULL ELSE v.content_sha256 END,
    metadata = CASE WHEN r.metadata THEN NULL ELSE v.metadata END,
    actor = CASE WHEN r.actor THEN :erased_actor ELSE v.actor END
FROM unnest(:ids::text[], :texts::bool[], :metadatas::bool[], :actors::bool[])
     AS r(id, text, metadata, actor)
WHERE v.workspace_id = :workspace AND v.id = r.id
""")

# The copies of the edited memories that may hold what she wrote: replays of writes that
# returned them, receivers' answers that may echo them, and the chunk vectors of a text
# rolled back (a text change leaves them until the worker writes the new ones).
FORGET_COPIES = NamedSQL("""
WITH replays AS (
    DELETE FROM idempotency_keys WHERE workspace_id = :workspace AND memory_ids && :ids::text[]
    RETURNING 1
), echoes AS (
    UPDATE webhook_deliveries d SET last_error = 'erased'
    FROM webhook_events e
    WHERE e.workspace_id = :workspace AND e.memory_id = ANY (:ids::text[])
      AND d.workspace_id = e.workspace_id AND d.event_id = e.id AND d.last_error IS NOT NULL
), chunks AS (
    DELETE FROM memory_chunks
    WHERE workspace_id = :workspace AND memory_id = ANY (:rewritten::text[])
)
SELECT (SELECT count(*) FROM replays)::int
""")


async def edited(
    conn: asyncpg.Connection, workspace_id: str, member: str, hers: list[str]
) -> tuple[dict[str, asyncpg.Record], list[Step]]:
    """The memories (not among ``hers``) the member changed, locked, by id; and their
    versions, oldest first."""
    rows = await EDITED.fetch(conn, workspace=workspace_id, member=member, hers=hers)
    current = {r["id"]: r for r in rows}
    steps = await HISTORY.fetch(
        conn, workspace=workspace_id, member=member, ids=list(current), erased_actor=ERASED_ACTOR
    )
    return current, [
        Step(r["id"], r["memory_id"], r["hers"], bool(r["gone"]), r["text"], r["metadata"])
        for r in steps
    ]


async def redact(conn: asyncpg.Connection, workspace_id: str, redactions: list[Redaction]) -> None:
    await REDACT.execute(
        conn,
        workspace=workspace_id,
        ids=[r.version_id for r in redactions],
        texts=[r.text for r in redactions],
        metadatas=[r.metadata for r in redactions],
        actors=[r.actor for r in redactions],
        erased_text=ERASED_TEXT,
        erased_actor=ERASED_ACTOR,
    )


async def forget_copies(
    conn: asyncpg.Connection, workspace_id: str, ids: list[str], rewritten: list[str]
) -> int:
    """Drop the copies of the edited memories ``ids``; how many replays went."""
    replays: int = await FORGET_COPIES.fetchval(
        conn, workspace=workspace_id, ids=ids, rewritten=rewritten
    )
    return replays
