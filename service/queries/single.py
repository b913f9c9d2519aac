"""The SQL of one new memory written in as few statements as the write rules allow
(service.write.single).

Each statement does what the general path (service.write.bulk) does step by step, in its
order: the store named by id or name and key-share locked until commit
(``memories.SELECT_STORE_FOR_WRITE``), the speaker registered in it, the identity lock
(``mneme_identity_key``, 0011), then the memory with its "created" version.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import asyncpg

from service.ids import new_id
from service.queries.memories import (
    COLUMN_TYPES,
    MEMORY_COLUMNS,
    WRITABLE,
    Memory,
    duplicate_rule,
    store_named,
    version_rows,
)
from service.queries.named import NamedSQL

# The store, and whether the memory's speaker (:speaker, null for none) is registered in
# it; "me" always is.
_STORE = f"""
store AS (
    SELECT stores.id, stores.name,
           (:speaker::text IS NULL OR :speaker = 'me' OR EXISTS (
               SELECT FROM speakers sp
               WHERE sp.workspace_id = :workspace AND sp.store_id = stores.id
                 AND sp.name = :speaker
           )) AS speaker_known
    FROM stores {store_named(":workspace", ":store")}
    FOR KEY SHARE OF stores
)"""

_VERSION = f"""
version AS ({version_rows(":version_id", "'created'", "created c")}
)"""


def _insert(columns: tuple[str, ...], source: str) -> str:
    names = ", ".join(columns)
    values = ", ".join(f":{c}::{COLUMN_TYPES[c]}" for c in columns)
    return f"""
INSERT INTO memories AS m (workspace_id, id, store_id, {names})
SELECT :workspace, :id, {source}, {values}"""


@functools.cache
def synced_statement(columns: tuple[str, ...]) -> NamedSQL:
    """A memory with a sync identity, in one statement (its own transaction): inserted
    unless the identity is held, which the unique index on it decides, so the lock is
    taken only to keep out writers that look before they insert (the general path)."""
    return NamedSQL(f"""
WITH {_STORE}, locked AS (
    SELECT store.id FROM store
    CROSS JOIN LATERAL (
        SELECT pg_advisory_xact_lock(
            mneme_identity_key(:workspace, store.id, :provider, :provider_ref))
    ) lock
    WHERE store.speaker_known
), created AS (
    {_insert(columns, "locked.id")} FROM locked
    ON CONFLICT (workspace_id, store_id, provider, provider_ref) DO NOTHING
    RETURNING {MEMORY_COLUMNS}
), {_VERSION}
SELECT store.id AS named_id, store.name AS named_name, store.speaker_known, created.*
FROM (VALUES (true)) one
LEFT JOIN store ON true
LEFT JOIN created ON true
""")


# The store of a memory without sync identity, its speaker, and the lock on its text (the
# duplicate rule), taken before the next statement looks for a duplicate (a statement sees
# only what was committed before it began).
STORE_AND_LOCK = NamedSQL(f"""
WITH {_STORE}
SELECT store.id, store.name, store.speaker_known FROM store
CROSS JOIN LATERAL (
    SELECT pg_advisory_xact_lock(mneme_identity_key(:workspace, store.id, '', :content_sha256))
) lock
""")


@functools.cache
def plain_statement(columns: tuple[str, ...]) -> NamedSQL:
    """A memory without sync identity, under the lock on its text: one more proof for the
    active memory it duplicates (``memories.duplicate_rule``; the lowest id), as
    ``memories.SELECT_DUPLICATE``, or inserted."""
    return NamedSQL(f"""
WITH duplicate AS (
    SELECT m.id FROM memories m
    WHERE {
        duplicate_rule(
            ":store_id",
            ":content_sha256",
            ":same_scope",
            ":same_speaker::text",
            ":text",
            ":media::bytea",
        )
    }
    ORDER BY m.id
    LIMIT 1
    FOR UPDATE
), bumped AS (
    UPDATE memories AS m SET proof_count = coalesce(m.proof_count, 1) + 1, updated_at = now()
    FROM duplicate d
    WHERE m.workspace_id = :workspace AND m.id = d.id
    RETURNING false AS created, {MEMORY_COLUMNS}
), created AS (
    {_insert(columns, ":store_id")}
    WHERE NOT EXISTS (SELECT FROM duplicate)
    RETURNING true AS created, {MEMORY_COLUMNS}
), {_VERSION}
SELECT * FROM bumped
UNION ALL
SELECT * FROM created
""")


@dataclass(frozen=True)
class Outcome:
    """What the statement found: the store's id and name (None: no such store), whether
    the speaker is registered there, and the memory written (None: nothing was)."""

    store_id: str | None
    store_name: str | None
    speaker_known: bool
    memory: Memory | None = None


def _values(
    workspace_id: str, actor: str | None, store: str, columns: dict[str, Any]
) -> dict[str, Any]:
    return {
        "workspace": workspace_id,
        "actor": actor,
        "store": store,
        "id": new_id("mem"),
        "version_id": new_id("memver"),
        **columns,
    }


def _memory(values: dict[str, Any]) -> Memory:
    for extra in ("named_id", "named_name", "speaker_known", "created"):
        values.pop(extra, None)
    return Memory(**values)


async def create_synced(
    conn: asyncpg.Connection,
    workspace_id: str,
    actor: str | None,
    store: str,
    columns: dict[str, Any],
    provider: str,
) -> Outcome:
    """Insert a memory whose ``columns`` hold a providerRef, unless its identity is held;
    ``provider`` is the columns' own or the default."""
    names = tuple(c for c in WRITABLE if c in columns)
    statement = synced_statement(names)
    values = _values(workspace_id, actor, store, columns)
    values.setdefault("speaker", None)
    values["provider"] = provider
    row = await statement.fetchrow(conn, **values)
    assert row is not None
    found = dict(row.items())
    return Outcome(
        store_id=found["named_id"],
        store_name=found["named_name"],
        speaker_known=bool(found["speaker_known"]),
        memory=None if found["id"] is None else _memory(found),
    )


async def store_and_lock(
    conn: asyncpg.Connection, workspace_id: str, store: str, speaker: str | None, sha256: str
) -> tuple[str, str, bool] | None:
    """The store's id and name, and whether the speaker is registered there (the text's
    lock is held when it is); None when there is no such store."""
    values = {
        "workspace": workspace_id,
        "store": store,
        "speaker": speaker,
        "content_sha256": sha256,
    }
    row = await STORE_AND_LOCK.fetchrow(conn, **values)
    return None if row is None else (row["id"], row["name"], row["speaker_known"])


async def create_plain(
    conn: asyncpg.Connection,
    workspace_id: str,
    actor: str | None,
    store_id: str,
    columns: dict[str, Any],
    scope: str,
) -> tuple[Memory, bool]:
    """The duplicate, one proof more, or the new memory (``True``), of a memory whose
    ``columns`` hold no providerRef; under the lock ``store_and_lock`` took. ``scope`` is
    the columns' own or the default (the duplicate rule compares it)."""
    memory_id = new_id("mem")
    columns = {**columns, "provider_ref": memory_id}  # its own reference, as memories.insert
    names = tuple(c for c in WRITABLE if c in columns)
    statement = plain_statement(names)
    values = {
        **_values(workspace_id, actor, "", columns),
        "id": memory_id,
        "store_id": store_id,
        "same_scope": scope,
        "same_speaker": columns.get("speaker"),
        "media": columns.get("media"),
    }
    del values["store"]
    row = await statement.fetchrow(conn, **values)
    assert row is not None
    found = dict(row.items())
    created = bool(found["created"])
    return _memory(found), created
