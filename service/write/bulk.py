"""Writing many memories at once: one statement per step for the whole batch.

``write_many`` is the set-based executor of the write engine (``service.write.engine``). A batch
whose items cannot affect one another — no paths, no ``supersedes``, no two items with
one sync identity or one text in one store — is written set-based: its stores, speakers,
identity locks, duplicates and sync holders are each looked up in one statement, and its
new memories are inserted with their versions in one more. The outcome is the one the
item-by-item path (``service.write.rules.write``) gives: the same dedupe, upsert and
idempotency rules, all-or-nothing, the first failing item's error. Any other batch, or
one whose sync upserts change memories while other items look for duplicates (an upsert
could make a memory a duplicate, or stop it being one, for an item after it), is left to
the engine to write item by item.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import asyncpg

from service.problems import Problem
from service.queries import bulk, memories
from service.queries.memories import Memory, Store
from service.write import rules
from service.write.rules import NewMemory, WriteContext, Written


@dataclass
class Item:
    """One item of a batch: its checked values, its store, or why it is refused."""

    index: int
    label: str
    new: NewMemory
    store: Store | None = None
    error: Problem | None = None

    def refuse(self, error: Problem) -> Problem:
        return error.labelled(self.label)

    @property
    def columns(self) -> dict[str, Any]:
        return self.new.columns

    @property
    def provider(self) -> str:
        return self.new.provider

    @property
    def scope(self) -> str:
        return self.new.scope


async def write_many(
    conn: asyncpg.Connection, ctx: WriteContext, items: list[NewMemory], labels: list[str]
) -> list[Written] | None:
    """Create, dedupe or upsert each item set-based (inside the caller's transaction), in
    order; ``labels`` prefix each item's error message ("memories[3]: ..."). ``None``:
    nothing was written, the items depend on one another (``service.write.engine`` then
    writes them one by one)."""
    checked = [await _check(conn, ctx, i, item, labels[i]) for i, item in enumerate(items)]
    if not _independent(checked):
        return None
    await _check_speakers(conn, ctx, checked)
    valid = [c for c in checked if c.error is None]
    await memories.lock_identities(conn, [i for c in valid if (i := _identity(ctx, c)) is not None])
    synced = [c for c in valid if "provider_ref" in c.columns]
    held = await _holders(conn, ctx, synced)
    _raise_first_refusal(checked, synced, held)

    plain = [c for c in checked if "provider_ref" not in c.columns]
    changing = any(
        rules.changed(m, c.columns) for c in synced if (m := held.get(c.index)) is not None
    )
    if plain and changing:
        return None

    results: dict[int, Written] = {}
    to_create: list[Item] = []
    for c in synced:
        if (memory := held.get(c.index)) is None:
            to_create.append(c)
        else:
            results[c.index] = await rules.upsert(conn, ctx, memory, c.columns)
    to_create += await _dedupe(conn, ctx, plain, results)
    for memory, c in await _create(conn, ctx, to_create):
        results[c.index] = Written(memory, created=True)
    return [results[i] for i in range(len(items))]


async def _holders(
    conn: asyncpg.Connection, ctx: WriteContext, synced: list[Item]
) -> dict[int, Memory | None]:
    """The memory holding each synced item's identity, by item index (``None``: one the
    caller cannot read)."""
    wanted = [
        bulk.Identity(c.index, _store(c).id, c.provider, c.columns["provider_ref"]) for c in synced
    ]
    return await bulk.holders(conn, ctx.principal, wanted)


def _raise_first_refusal(
    checked: list[Item], synced: list[Item], held: dict[int, Memory | None]
) -> None:
    """Raise the first refused item's error, as writing item by item would."""
    synced_at = {c.index for c in synced}
    for c in checked:
        if c.error is None and c.index in synced_at:
            if c.index not in held and "text" not in c.columns:  # a new memory needs text
                c.error = rules.text_required()
            elif c.index in held and held[c.index] is None:
                c.error = rules.held_elsewhere(c.columns, c.provider, _store(c))
        if c.error is not None:
            raise c.refuse(c.error)


async def _dedupe(
    conn: asyncpg.Connection, ctx: WriteContext, plain: list[Item], results: dict[int, Written]
) -> list[Item]:
    """Each plain item's duplicate, one proof more, into ``results``; the items that
    have none (to be created)."""
    wanted = [
        bulk.Dedupe(
            c.index,
            _store(c).id,
            c.columns["content_sha256"],
            c.scope,
            c.columns.get("speaker"),
            c.columns["text"],
            c.columns.get("media"),
        )
        for c in plain
    ]
    found = await bulk.duplicates(conn, ctx.workspace_id, wanted)
    bumped = await bulk.bump_proofs(conn, ctx.workspace_id, [m.id for m in found.values()])
    fresh: list[Item] = []
    for c in plain:
        if c.index in found:
            results[c.index] = Written(bumped[found[c.index].id], deduplicated=True)
        else:
            fresh.append(c)
    return fresh


async def _check(
    conn: asyncpg.Connection, ctx: WriteContext, index: int, new: NewMemory, label: str
) -> Item:
    """What can be checked before any write: values, store, scope. A refusal is kept, not
    raised, so that the first refused item can be found after the speakers are checked."""
    checked = Item(index, label, new)
    try:
        checked.store = await rules.writable_store(conn, ctx, checked.new.store_ref)
        if (refused := checked.new.refusal(ctx.principal)) is not None:
            raise refused
    except Problem as exc:
        checked.error = exc
    return checked


def _independent(checked: list[Item]) -> bool:
    """Whether no item's outcome can depend on another's: what the set-based path needs."""
    identities: set[tuple[str, str, str]] = set()
    texts: set[tuple[str, str]] = set()
    for c in checked:
        if c.error is not None:
            continue  # the batch is refused: which item decides is worked out in order
        if c.new.supersedes is not None or "path" in c.columns:
            return False
        store = _store(c).id
        if "provider_ref" in c.columns:
            identity = (store, c.provider, c.columns["provider_ref"])
            if identity in identities:
                return False
            identities.add(identity)
        if "text" in c.columns:
            text = (store, c.columns["content_sha256"])
            if text in texts:
                return False
            texts.add(text)
    return True


async def _check_speakers(conn: asyncpg.Connection, ctx: WriteContext, checked: list[Item]) -> None:
    """Every named speaker must be registered in its store: one lookup for the batch."""
    wanted = {
        (_store(c).id, c.columns["speaker"])
        for c in checked
        if c.error is None and c.columns.get("speaker") not in (None, "me")
    } - ctx.speakers
    ctx.speakers |= await bulk.registered_speakers(conn, ctx.workspace_id, wanted)
    for c in checked:
        speaker = c.columns.get("speaker")
        if c.error is None and isinstance(speaker, str) and speaker != "me":
            store = _store(c)
            if (store.id, speaker) not in ctx.speakers:
                c.error = rules.unregistered_speaker(store.id, store.name, speaker)


def _identity(ctx: WriteContext, c: Item) -> memories.Identity | None:
    return rules.identity_of(
        ctx,
        _store(c).id,
        c.provider,
        c.columns.get("provider_ref"),
        None,
        c.columns.get("content_sha256"),
    )


def _store(c: Item) -> Store:
    assert c.store is not None
    return c.store


async def _create(
    conn: asyncpg.Connection, ctx: WriteContext, items: list[Item]
) -> list[tuple[Memory, Item]]:
    """Inserts the items' memories with their versions: one statement per set of columns
    the items set (a batch written by one client usually sets one)."""
    groups: dict[tuple[str, ...], list[tuple[Item, dict[str, Any]]]] = defaultdict(list)
    for c in items:
        columns = rules.creation_defaults(ctx, c.columns)
        groups[tuple(sorted(columns))].append((c, columns))
    out: list[tuple[Memory, Item]] = []
    for group in groups.values():
        stores = [_store(c).id for c, _ in group]
        rows = [columns for _, columns in group]
        inserted = await bulk.insert(conn, ctx.workspace_id, ctx.principal.key_id, stores, rows)
        out += zip(inserted, [c for c, _ in group], strict=True)
    return out
