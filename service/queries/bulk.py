"""The SQL of set-based writes: one statement per step for a whole batch (service.write.bulk).

Each statement takes the batch as parallel arrays (``unnest``) and answers row by row
with the item's position (``ord``), so the caller matches answers to items whatever
order PostgreSQL returns them in.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from service.ids import new_id
from service.queries.keys import Principal
from service.queries.memories import (
    COLUMN_TYPES,
    MEMORY_COLUMNS,
    WRITABLE,
    Memory,
    duplicate_rule,
    version_rows,
)
from service.queries.named import NamedSQL

# Each writable column's type in an ``unnest`` array. entity_refs (text[]) and metadata
# (jsonb) travel as JSON text: an array of arrays would be read as one 2-D array.
ARRAY_TYPES = {**COLUMN_TYPES, "entity_refs": "text", "metadata": "text"}

# How an unnested value becomes the column's.
_VALUE = {
    "entity_refs": "ARRAY(SELECT jsonb_array_elements_text(v.entity_refs::jsonb))",
    "metadata": "v.metadata::jsonb",
}


def _encoded(column: str, value: Any) -> Any:
    return json.dumps(value) if column in _VALUE else value


@functools.cache
def insert_statement(columns: tuple[str, ...]) -> NamedSQL:
    """Inserts memories that set ``columns`` (the rest take their defaults), each with its
    "created" version, in one statement; returns the memories."""
    arrays = ", ".join(f":{c}::{ARRAY_TYPES[c]}[]" for c in columns)
    names = ", ".join(columns)
    values = ", ".join(_VALUE.get(c, f"v.{c}") for c in columns)
    return NamedSQL(f"""
WITH v AS (
    SELECT * FROM unnest(:ids::text[], :stores::text[], :version_ids::text[], {arrays})
        AS v(id, store_id, version_id, {names})
), created AS (
    INSERT INTO memories AS m (workspace_id, id, store_id, {names})
    SELECT :workspace, v.id, v.store_id, {values} FROM v
    RETURNING {MEMORY_COLUMNS}
), versions AS ({version_rows("v.version_id", "'created'", "created c JOIN v ON v.id = c.id")}
)
SELECT * FROM created
""")


async def insert(
    conn: asyncpg.Connection,
    workspace_id: str,
    actor: str | None,
    stores: Sequence[str],
    rows: Sequence[dict[str, Any]],
) -> list[Memory]:
    """New memories, in the order of ``rows`` (their columns; all set the same ones)."""
    ids = [new_id("mem") for _ in rows]
    if "provider_ref" not in rows[0]:  # a memory of no sync identity is its own reference
        rows = [{**r, "provider_ref": i} for r, i in zip(rows, ids, strict=True)]
    columns = tuple(c for c in WRITABLE if c in rows[0])
    assert all(set(r) == set(columns) for r in rows), "one statement sets one set of columns"
    statement = insert_statement(columns)
    values: dict[str, Any] = {
        "workspace": workspace_id,
        "actor": actor,
        "ids": ids,
        "stores": list(stores),
        "version_ids": [new_id("memver") for _ in rows],
    }
    for c in columns:
        values[c] = [_encoded(c, r[c]) for r in rows]
    found = await statement.fetch(conn, **values)
    by_id = {row["id"]: Memory(**dict(row.items())) for row in found}
    return [by_id[i] for i in ids]


# The active memory each item would duplicate (memories.duplicate_rule), the lowest id
# when several do; locked, as the single write's SELECT_DUPLICATE.
DUPLICATES = NamedSQL(f"""
SELECT v.ord, d.* FROM unnest(:ords::int[], :stores::text[], :sha256s::text[], :scopes::text[],
                              :speakers::text[], :texts::text[], :medias::bytea[])
         AS v(ord, store_id, sha256, scope, speaker, text, media)
CROSS JOIN LATERAL (
    SELECT {MEMORY_COLUMNS} FROM memories m
    WHERE {duplicate_rule("v.store_id", "v.sha256", "v.scope", "v.speaker", "v.text", "v.media")}
    ORDER BY m.id
    LIMIT 1
    FOR UPDATE
) d
""")


@dataclass(frozen=True)
class Dedupe:
    ord: int
    store_id: str
    sha256: str
    scope: str
    speaker: str | None
    text: str
    media: bytes | None


async def duplicates(
    conn: asyncpg.Connection, workspace_id: str, wanted: Sequence[Dedupe]
) -> dict[int, Memory]:
    if not wanted:
        return {}
    values = {
        "workspace": workspace_id,
        "ords": [w.ord for w in wanted],
        "stores": [w.store_id for w in wanted],
        "sha256s": [w.sha256 for w in wanted],
        "scopes": [w.scope for w in wanted],
        "speakers": [w.speaker for w in wanted],
        "texts": [w.text for w in wanted],
        "medias": [w.media for w in wanted],
    }
    found = await DUPLICATES.fetch(conn, **values)
    return {row["ord"]: _memory_of(row) for row in found}


# Who holds each (store, provider, providerRef), locked, and whether the caller may read
# it (as memories.SELECT_BY_PROVIDER_REF, for many at once).
HOLDERS = NamedSQL(f"""
SELECT v.ord, h.* FROM unnest(:ords::int[], :stores::text[], :providers::text[], :refs::text[])
         AS v(ord, store_id, provider, provider_ref)
CROSS JOIN LATERAL (
    SELECT {MEMORY_COLUMNS},
           mneme_readable(m.scope, :is_service, :member, :rooms) AS readable
    FROM memories m
    WHERE m.workspace_id = :workspace AND m.store_id = v.store_id
      AND m.provider = v.provider AND m.provider_ref = v.provider_ref
    FOR UPDATE
) h
""")


@dataclass(frozen=True)
class Identity:
    ord: int
    store_id: str
    provider: str
    provider_ref: str


async def holders(
    conn: asyncpg.Connection, principal: Principal, wanted: Sequence[Identity]
) -> dict[int, Memory | None]:
    """The memory holding each identity that is held: ``None`` when the caller cannot
    read it."""
    if not wanted:
        return {}
    values = {
        "workspace": principal.workspace_id,
        "is_service": principal.is_service,
        "member": principal.member,
        "rooms": principal.rooms,
        "ords": [w.ord for w in wanted],
        "stores": [w.store_id for w in wanted],
        "providers": [w.provider for w in wanted],
        "refs": [w.provider_ref for w in wanted],
    }
    found = await HOLDERS.fetch(conn, **values)
    return {row["ord"]: _memory_of(row) if row["readable"] else None for row in found}


BUMP_PROOFS = NamedSQL(f"""
UPDATE memories AS m SET proof_count = coalesce(m.proof_count, 1) + 1, updated_at = now()
FROM unnest(:ids::text[]) AS v(id)
WHERE m.workspace_id = :workspace AND m.id = v.id
RETURNING {MEMORY_COLUMNS}
""")


async def bump_proofs(
    conn: asyncpg.Connection, workspace_id: str, ids: Sequence[str]
) -> dict[str, Memory]:
    """One more proof for each memory (distinct ids)."""
    if not ids:
        return {}
    found = await BUMP_PROOFS.fetch(conn, workspace=workspace_id, ids=list(ids))
    return {row["id"]: _memory_of(row) for row in found}


SPEAKERS = NamedSQL("""
SELECT s.store_id, s.name FROM speakers s
JOIN unnest(:stores::text[], :names::text[]) AS v(store_id, name)
  ON s.store_id = v.store_id AND s.name = v.name
WHERE s.workspace_id = :workspace
""")


async def registered_speakers(
    conn: asyncpg.Connection, workspace_id: str, wanted: set[tuple[str, str]]
) -> set[tuple[str, str]]:
    """Which of the (store id, speaker) pairs are registered."""
    if not wanted:
        return set()
    stores, names = zip(*sorted(wanted), strict=True)
    found = await SPEAKERS.fetch(
        conn, workspace=workspace_id, stores=list(stores), names=list(names)
    )
    return {(row["store_id"], row["name"]) for row in found}


def _memory_of(row: asyncpg.Record) -> Memory:
    values = dict(row.items())
    values.pop("ord", None)
    values.pop("readable", None)
    return Memory(**values)
