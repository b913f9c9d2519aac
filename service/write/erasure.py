"""``POST /api/v1/erasures`` and ``mneme erase``: the one way a person is erased.

An erasure takes what is about the person or written by them (SPEC §9), never someone
else's memory they merely edited: of such a memory, the versions a member wrote are
redacted (``ERASED_TEXT``, no hash, ``ERASED_ACTOR``), as is her text or metadata where a
later version of someone else carries it; where what is current is hers, the memory goes
back to what it was before her (a change by the actor ``erasure``, through the write rules:
a version, a webhook event, a new vector), or, with nothing before her, is tombstoned.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from itertools import groupby
from typing import Any

import asyncpg

from service.problems import Invalid, NotFound
from service.queries import erasure, memories, search_stats
from service.queries.erasure import ERASED_TEXT, Erased, Redaction, Step
from service.write import fields, rules, transfer

# What a memory's versions record of its content that a person writes; its path is set at
# its creation only, and the other fields are not versioned (so not known to be hers).
CONTENT = ("text", "metadata")
# Who the value of a field came from, as a memory's versions tell it.
HER, OTHER, GONE = "her", "other", "gone"
ACTOR = "erasure"  # the actor of the roll-backs an erasure writes


@dataclass(frozen=True)
class Target:
    """A member of the workspace, or a speaker of one store (by id or name)."""

    member: str | None = None
    speaker: str | None = None
    store: str | None = None


def check(target: Target) -> Target:
    if (target.member is None) == (target.speaker is None):
        raise Invalid('Name either "member", or "speaker" and "store"')
    if target.member is not None and target.store is not None:
        raise Invalid('"store" goes with "speaker"; a member is erased workspace-wide')
    if target.speaker is not None and target.store is None:
        raise Invalid('"speaker" needs "store": a speaker is a name within one store')
    for value in (target.member, target.speaker, target.store):
        if value is not None and not value.strip():
            raise Invalid("member, speaker and store may not be blank")
    if target.speaker is not None and target.speaker.lower() == "me":
        raise Invalid("Speaker 'me' is the agent itself, not a person")
    return target


async def erase(pool: asyncpg.Pool, workspace_id: str, target: Target) -> Erased:
    """Erase everything about ``target`` in one transaction: what was erased."""
    check(target)
    async with pool.acquire() as conn, conn.transaction():
        if target.member is not None:
            return await _erase_member(conn, workspace_id, target.member)
        assert target.speaker is not None and target.store is not None
        store = await memories.resolve_store(conn, workspace_id, target.store)
        if store is None:
            raise NotFound(f"Store {target.store!r} not found")
        return await erasure.erase_speaker(conn, workspace_id, store.id, target.speaker)


def erased_object(e: Erased) -> dict[str, Any]:
    """What was erased, as the API and `mneme erase` print it."""
    return {
        "memories": e.memories,
        "versions": e.versions,
        "chunks": e.chunks,
        "images": e.images,
        "cachedAnswers": e.cached_answers,
        "replays": e.replays,
        "speakers": e.speakers,
    }


async def _erase_member(conn: asyncpg.Connection, workspace_id: str, member: str) -> Erased:
    found = await erasure.member_memories(conn, workspace_id, member)
    if found is None:
        raise NotFound(f"Member {member!r} not found")
    names, hers = found
    erased = await erasure.erase_memories(conn, workspace_id, hers, names)
    versions, replays = await _take_out_edits(conn, workspace_id, member, hers)
    return dataclasses.replace(
        erased, versions=erased.versions + versions, replays=erased.replays + replays
    )


async def _take_out_edits(
    conn: asyncpg.Connection, workspace_id: str, member: str, hers: list[str]
) -> tuple[int, int]:
    """Take what ``member`` wrote out of the memories she edited but did not write (not
    among ``hers``): how many versions were redacted, and how many replays went."""
    current, steps = await erasure.edited(conn, workspace_id, member, hers)
    if not current:
        return 0, 0
    redactions: list[Redaction] = []
    rollbacks: dict[str, dict[str, Any]] = {}
    for memory_id, history in groupby(steps, key=lambda s: s.memory_id):
        redacted, back = _walk(list(history), current[memory_id])
        redactions += redacted
        if back:
            rollbacks[memory_id] = _rollback_columns(back)
    await erasure.redact(conn, workspace_id, redactions)
    ctx = rules.WriteContext(transfer.service_principal(workspace_id, ACTOR))
    stores = set()
    for memory_id, columns in rollbacks.items():
        stores.add((await rules.patch(conn, ctx, memory_id, columns)).store_id)
    rewritten = [m for m, columns in rollbacks.items() if "text" in columns]
    replays = await erasure.forget_copies(conn, workspace_id, list(current), rewritten)
    for store in sorted(stores):  # her words gone from the statistics at once, as above
        await search_stats.compact_store(conn, workspace_id, store)
    return len(redactions), replays


def _walk(
    history: list[Step], current: asyncpg.Record | dict[str, Any]
) -> tuple[list[Redaction], dict[str, Any]]:
    """One memory's versions (oldest first) and its current row: which versions to redact,
    and the content fields whose current value is hers, each with the last value someone
    else gave it (``None``: there is none)."""
    author: dict[str, str] = {}
    last_other: dict[str, Any] = {}
    redactions = []
    previous: dict[str, Any] | None = None
    for step in history:
        values = {"text": step.text, "metadata": step.metadata}
        for f in CONTENT:
            if previous is None or values[f] != previous[f]:  # this version set it
                author[f] = _author(step, f, values[f])
                if author[f] == OTHER:
                    last_other[f] = values[f]
        if step.hers:
            redactions.append(Redaction(step.id, text=True, metadata=True, actor=True))
        elif carried := [f for f in CONTENT if author[f] == HER]:
            # Someone else's version that left her text or metadata as it was holds it too.
            redactions.append(
                Redaction(step.id, "text" in carried, "metadata" in carried, actor=False)
            )
        previous = values
    assert previous is not None
    # A field is rolled back only where the memory still holds what its last version says
    # (an unversioned change is no one's known writing).
    back = {f: last_other.get(f) for f in CONTENT if author[f] == HER and current[f] == previous[f]}
    return redactions, back


def _author(step: Step, field: str, value: Any) -> str:
    if step.hers:
        return HER
    if step.gone or value is None or (field == "text" and value == ERASED_TEXT):
        return GONE  # what an earlier erasure left: no one's to go back to
    return OTHER


def _rollback_columns(back: dict[str, Any]) -> dict[str, Any]:
    """The columns that put ``back`` (``_walk``) into a memory: the text (and what derives
    from it) and metadata someone else last gave it; a tombstone with no text to go back to."""
    columns: dict[str, Any] = {}
    if "metadata" in back:
        columns["metadata"] = back["metadata"] if back["metadata"] is not None else {}
    if "text" in back:
        text = back["text"]
        if text is None:
            text = ERASED_TEXT
            columns["status"] = "deleted"
        raw = text.encode()
        columns.update(
            text=text, content_sha256=fields.sha256_hex(raw), content_size_bytes=len(raw)
        )
    return columns
