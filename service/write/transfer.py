"""``mneme import`` / ``mneme export``: a store's memories as JSON lines, streamed.

Each line is a write-API memory object (camelCase), so an exported file imports through
the same rules as ``POST /api/v1/memories``. ``providerRef`` is always exported (it
defaults to the memory's own id), which makes re-importing the same file an upsert, not
a copy. Image media travel as base64. Links between memories (``supersededBy``) are
not exported.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncGenerator, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import asyncpg
import msgspec

from service.decoding import decode_json
from service.problems import Problem
from service.queries import memories
from service.queries.keys import Principal
from service.queries.named import NamedSQL
from service.times import iso, iso_or_none
from service.write import engine, fields, items, rules

BATCH = 500

EXPORT = NamedSQL(f"""
SELECT m.text, m.scope, m.tier, m.fact_type, m.status, m.provider, m.provider_ref,
       m.entity_refs, m.proof_count, m.category, m.importance, m.speaker, m.event_date,
       m.path, m.metadata, m.expires_at, m.transitory, m.first_seen_at,
       {memories.LAST_USED_AT} AS last_used_at, m.media, m.media_type
FROM memories m
WHERE m.workspace_id = :workspace AND m.store_id = :store
  AND (m.status <> 'deleted' OR :include_deleted)
ORDER BY m.created_at, m.id
""")


def export_line(r: asyncpg.Record) -> dict[str, Any]:
    line: dict[str, Any] = {
        "text": r["text"],
        "scope": r["scope"],
        "tier": r["tier"],
        "factType": r["fact_type"],
        "status": r["status"],
        "provider": r["provider"],
        "providerRef": r["provider_ref"],
        "entityRefs": r["entity_refs"],
        "proofCount": r["proof_count"],
        "category": r["category"],
        "importance": r["importance"],
        "speaker": r["speaker"],
        "eventDate": iso_or_none(r["event_date"]),
        "metadata": r["metadata"],
        "expiresAt": iso_or_none(r["expires_at"]),
        "transitory": r["transitory"],
        "firstSeenAt": iso(r["first_seen_at"]),
        "lastUsedAt": iso(r["last_used_at"]),
    }
    if r["path"] is not None:
        line["path"] = r["path"]
    if r["media"] is not None:
        line["image"] = {
            "data": base64.b64encode(bytes(r["media"])).decode(),
            "mimeType": r["media_type"],
        }
    return line


async def export_store(
    conn: asyncpg.Connection, workspace_id: str, store_id: str, *, include_deleted: bool = False
) -> AsyncGenerator[bytes, None]:
    """JSON lines, streamed through a server-side cursor (constant memory)."""
    encoder = msgspec.json.Encoder()
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        values = {"workspace": workspace_id, "store": store_id, "include_deleted": include_deleted}
        async for row in conn.cursor(EXPORT.sql, *EXPORT.args(values), prefetch=500):
            yield encoder.encode(export_line(row)) + b"\n"


@dataclass
class ImportResult:
    created: int = 0
    deduplicated: int = 0
    upserted: int = 0
    speakers_registered: int = 0
    through: int = 0  # the last line of the last batch committed (0: none yet)


class ImportRefused(Exception):
    """A line that the write rules refuse; names the line number. ``through``: the last
    line committed before it (the batches before the refused one stay imported)."""

    def __init__(self, message: str, through: int) -> None:
        super().__init__(message)
        self.through = through


def service_principal(workspace_id: str, actor: str) -> Principal:
    return Principal(
        key_id=actor,
        workspace_id=workspace_id,
        workspace_tier="scale",
        kind="service",
        member=None,
        scopes=frozenset({"memory:read", "memory:write", "admin"}),
        rooms=[],
    )


async def register_speakers(
    conn: asyncpg.Connection,
    workspace_id: str,
    store: memories.Store,
    lines: list[tuple[int, items.MemoryIn]],
    *,
    limit: int,
) -> int:
    """Register the speakers the lines name, by the same rules as POST .../speakers (at
    most ``limit`` in the store); how many were new. A name those rules refuse is refused
    as its first line."""
    named: dict[str, int] = {}  # each speaker, and the first line naming it
    for number, item in lines:
        if isinstance(item.speaker, str) and item.speaker != "me":
            named.setdefault(item.speaker, number)
    added = 0
    for speaker, number in sorted(named.items()):
        try:
            fields.check_speaker_name(speaker)
        except Problem as exc:
            raise exc.labelled(f"line {number}") from None
        done = await memories.add_speaker(conn, workspace_id, store.id, speaker, limit=limit)
        if done.outcome == "full":
            raise fields.speakers_full(store.name, limit).labelled(f"line {number}")
        added += done.outcome == "added"
    return added


async def import_lines(
    pool: asyncpg.Pool,
    workspace_id: str,
    store: memories.Store,
    lines: Iterable[tuple[int, bytes]],
    *,
    create_speakers: bool = False,
    max_speakers: int,
    progress: Callable[[int], None] = lambda n: None,
) -> ImportResult:
    """Write (line number, JSON) pairs into ``store`` in transactions of ``BATCH`` lines.

    Every batch before a refused line stays imported; the error names the line.
    """
    result = ImportResult()
    principal = service_principal(workspace_id, "cli:import")
    batch: list[tuple[int, items.MemoryIn]] = []

    async def flush() -> None:
        async with pool.acquire() as conn, conn.transaction():
            checked = items.Batch([], batch=True)
            for number, item in batch:
                if not checked.add(item, f"line {number}"):
                    break
            try:
                if create_speakers:
                    added = await register_speakers(
                        conn, workspace_id, store, batch, limit=max_speakers
                    )
                    result.speakers_registered += added
                written = await engine.apply_in(conn, rules.WriteContext(principal), checked)
            except Problem as exc:
                raise ImportRefused(exc.message, result.through) from None
            for done in written:
                result.created += done.created
                result.deduplicated += done.deduplicated
                result.upserted += done.upserted
        result.through = batch[-1][0]
        progress(len(batch))
        batch.clear()

    for number, raw in lines:
        if not raw.strip():
            continue
        try:
            item = decode_json(raw, items.MemoryIn, what="Memory")
        except Problem as exc:
            raise ImportRefused(f"line {number}: {exc.message}", result.through) from None
        item.store = store.id
        batch.append((number, item))
        if len(batch) >= BATCH:
            await flush()
    if batch:
        await flush()
    return result
