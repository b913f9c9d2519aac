"""The write rules, and the one-by-one executor: create, dedupe, upsert; patch, delete, purge.

Every write comes through the write engine (``service.write.engine``), so every way in
follows the same rules; ``service.write.bulk`` writes a batch set-based where that gives
the same outcome as ``write`` item by item. Each function runs inside the
caller's transaction; a batch is all-or-nothing because the first failing item raises
and the transaction rolls back. What every change to memories must also do — stamp the
store's version (the search cache) and wake the embedding workers — triggers on
``memories`` do (0007_trust.sql): no function here has to remember it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg

from service.decoding import string_problem
from service.problems import Conflict, Forbidden, Invalid, NotFound, Problem
from service.queries import memories
from service.queries.keys import Principal
from service.queries.memories import Memory, Store
from service.write import supersession

# What a new memory takes when a write omits it: the store every workspace has
# (queries/tenancy.py) and the schema's column defaults (0001_schema.sql), which
# tests/test_write_rules.py holds these to.
DEFAULT_STORE = "default"
DEFAULT_PROVIDER = "mneme"
DEFAULT_SCOPE = "workspace"
# Text, path, metadata, status and scope changes are what the audit trail records.
VERSIONED = ("text", "path", "metadata", "status", "scope")


@dataclass(frozen=True)
class Written:
    memory: Memory
    created: bool = False
    deduplicated: bool = False
    upserted: bool = False


@dataclass
class WriteContext:
    """One request's caller, plus what it has already looked up."""

    principal: Principal
    default_tier: str = "hindsight"
    stores: dict[str, Store] = field(default_factory=dict)
    speakers: set[tuple[str, str]] = field(default_factory=set)  # (store id, name) seen

    @property
    def workspace_id(self) -> str:
        return self.principal.workspace_id


@dataclass
class NewMemory:
    """A memory to write (create, dedupe or upsert), its values checked: the first step
    of every write path (``write``, ``lock_batch``, ``service.write.bulk``,
    ``service.write.single``), so each follows the same rules in the same order."""

    columns: dict[str, Any]
    store_ref: str
    supersedes: str | None

    @property
    def provider(self) -> str:
        return str(self.columns.get("provider", DEFAULT_PROVIDER))

    @property
    def scope(self) -> str:
        return str(self.columns.get("scope", DEFAULT_SCOPE))

    def storable(self) -> bool:
        """Whether the strings looked up in SQL (store, speaker, provider, providerRef)
        can be sent as text; one that cannot is refused by the item-by-item path."""
        looked_up = ("speaker", "provider", "provider_ref")
        strings = [self.store_ref, *(self.columns.get(c) or "" for c in looked_up)]
        return all(string_problem(s) is None for s in strings)

    def refusal(self, principal: Principal) -> Problem | None:
        """Why this caller may not write it, once its store is found: a scope its key
        cannot read, or no text where it is not a sync write (which may be an upsert)."""
        if "scope" in self.columns:
            try:
                check_writable_scope(principal, self.scope)
            except Problem as exc:
                return exc
        if "provider_ref" not in self.columns and "text" not in self.columns:
            return text_required()
        return None


# --- checks that need the database ------------------------------------------------------------


async def writable_store(conn: asyncpg.Connection, ctx: WriteContext, ref: str) -> Store:
    """The store ``ref`` (an id, or a name in any case) names, locked for a write; each
    looked up once per request (``ctx.stores``)."""
    key = ref.lower() if not ref.startswith("memstore_") else ref
    store = ctx.stores.get(key)
    if store is None:
        store = await memories.resolve_store(conn, ctx.workspace_id, ref, for_write=True)
        if store is None:
            raise store_not_found(ref)
        ctx.stores[key] = store
    return store


def check_writable_scope(principal: Principal, scope: str) -> None:
    """A personal key may only write into scopes it can read."""
    if principal.is_service:
        return
    kind, _, rest = scope.partition(":")
    if scope == "workspace":
        return
    if kind == "room" and rest in principal.rooms:
        return
    if kind == "pair" and principal.member in rest.split(":"):
        return
    raise Forbidden(f"This key cannot write into scope {scope!r}: its member cannot read it")


async def check_speaker(
    conn: asyncpg.Connection, ctx: WriteContext, store: Store, speaker: str
) -> None:
    if (store.id, speaker) in ctx.speakers:
        return
    if await memories.speaker_exists(conn, ctx.workspace_id, store.id, speaker):
        ctx.speakers.add((store.id, speaker))
    else:
        raise unregistered_speaker(store.id, store.name, speaker)


def unregistered_speaker(store_id: str, store_name: str, speaker: str) -> Problem:
    return NotFound(
        f"Speaker {speaker!r} is not registered in store {store_name!r}; "
        f"register it with POST /api/v1/stores/{store_id}/speakers"
    )


def store_not_found(ref: str) -> Problem:
    return NotFound(f"Store {ref!r} not found")


def text_required() -> Problem:
    return Invalid("text is required", param="text")


def held_elsewhere(columns: dict[str, Any], provider: str, store: Store) -> Problem:
    """A sync identity held by a memory the caller cannot read: it is unique per store,
    so this write cannot have it either; say no more than that it is taken (not by what,
    in which scope, saying what)."""
    return Conflict(
        f"providerRef {columns['provider_ref']!r} of provider {provider!r} is already "
        f"used in store {store.name!r} by a memory this key cannot access"
    )


def changed(memory: Memory, columns: dict[str, Any]) -> dict[str, Any]:
    """The columns whose value differs from what is stored."""
    out = {}
    for name, value in columns.items():
        if name == "media" or not hasattr(memory, name) or getattr(memory, name) != value:
            out[name] = value
    return out


def version_operation(before: Memory | None, after: Memory) -> str | None:
    if before is None:
        return "created"
    if all(getattr(before, f) == getattr(after, f) for f in VERSIONED):
        return None
    if after.status == "deleted" and before.status != "deleted":
        return "deleted"
    return "modified"


# --- create -------------------------------------------------------------------------------


def identity_of(
    ctx: WriteContext,
    store_id: str,
    provider: str,
    provider_ref: str | None,
    path: str | None,
    content_sha256: str | None,
) -> memories.Identity | None:
    """What a write's outcome hangs on besides its own row, locked by
    ``memories.lock_identities``: its sync identity, or (no path, no providerRef) its text, for
    the duplicate rule. Two writes of one identity are serialised until commit. A path
    write has none: the unique index on paths decides between two of them."""
    if provider_ref is not None:
        return (ctx.workspace_id, store_id, provider, provider_ref)
    if path is not None or content_sha256 is None:
        return None
    return (ctx.workspace_id, store_id, "", content_sha256)  # "": no provider is blank


async def lock_batch(conn: asyncpg.Connection, ctx: WriteContext, items: list[NewMemory]) -> None:
    """Take the identity locks every item of a batch will need, in one sorted order,
    before writing any: two batches sharing texts or references in different orders
    would otherwise each hold a lock the other waits for (a deadlock). An item whose key
    cannot be worked out (bad text, unknown store) takes none: it fails in its turn."""
    identities = []
    for new in items:
        try:
            if not new.storable():
                continue  # they are looked up or locked in SQL: the item fails in its turn
            store = await writable_store(conn, ctx, new.store_ref)
        except Problem:
            continue
        if (identity := _identity(ctx, store, new)) is not None:
            identities.append(identity)
    await memories.lock_identities(conn, identities)


def _identity(ctx: WriteContext, store: Store, new: NewMemory) -> memories.Identity | None:
    columns = new.columns
    return identity_of(
        ctx,
        store.id,
        new.provider,
        columns.get("provider_ref"),
        columns.get("path"),
        columns.get("content_sha256"),
    )


async def write(
    conn: asyncpg.Connection, ctx: WriteContext, new: NewMemory, *, label: str = ""
) -> Written:
    """Create, dedupe or upsert one memory (inside the caller's transaction)."""
    try:
        return await _write(conn, ctx, new)
    except Problem as exc:
        raise exc.labelled(label) from None


async def _write(conn: asyncpg.Connection, ctx: WriteContext, new: NewMemory) -> Written:
    store = await writable_store(conn, ctx, new.store_ref)
    if (refused := new.refusal(ctx.principal)) is not None:
        raise refused
    if new.columns.get("speaker") is not None:
        await check_speaker(conn, ctx, store, new.columns["speaker"])
    superseded: Memory | None = None
    if new.supersedes is not None:
        superseded = await memories.get_readable(
            conn, ctx.principal, new.supersedes, for_update=True
        )
        if superseded is None:
            raise NotFound(f"Memory {new.supersedes!r} (supersedes) not found")
    if (identity := _identity(ctx, store, new)) is not None:
        await memories.lock_identities(conn, [identity])
    if "provider_ref" in new.columns:
        result = await _write_synced(conn, ctx, store, new)
    elif "path" in new.columns:
        result = await _create(conn, ctx, store, new.columns)
    else:
        result = await _write_plain(conn, ctx, store, new)
    if superseded is not None and superseded.id != result.memory.id:
        supersession.check_supersedes(result.memory, superseded)
        await memories.set_superseded(conn, ctx.workspace_id, superseded.id, result.memory.id)
    return result


async def _write_synced(
    conn: asyncpg.Connection, ctx: WriteContext, store: Store, new: NewMemory
) -> Written:
    """A write with a sync identity: an upsert of the memory holding it, or a new one."""
    columns = new.columns
    holder = await memories.by_provider_ref(
        conn, ctx.principal, store.id, new.provider, columns["provider_ref"]
    )
    if holder is None:
        return await _create(conn, ctx, store, columns)
    if holder.memory is None:
        raise held_elsewhere(columns, new.provider, store)
    return await upsert(conn, ctx, holder.memory, columns)


async def _write_plain(
    conn: asyncpg.Connection, ctx: WriteContext, store: Store, new: NewMemory
) -> Written:
    """A write without identity or path: one more proof for a duplicate, or a new one."""
    columns = new.columns
    duplicate = await memories.find_duplicate(
        conn,
        ctx.workspace_id,
        store.id,
        columns["content_sha256"],
        new.scope,
        columns.get("speaker"),
        columns["text"],
        columns.get("media"),
    )
    if duplicate is None:
        return await _create(conn, ctx, store, columns)
    bumped = await memories.bump_proof(conn, ctx.workspace_id, duplicate.id)
    return Written(bumped, deduplicated=True)


async def _create(
    conn: asyncpg.Connection, ctx: WriteContext, store: Store, columns: dict[str, Any]
) -> Written:
    if "text" not in columns:
        raise text_required()
    columns = creation_defaults(ctx, columns)
    try:
        async with conn.transaction():  # a savepoint: a path conflict must not poison the batch
            memory = await memories.insert(conn, ctx.workspace_id, store.id, columns)
    except asyncpg.UniqueViolationError:
        raise Conflict(f"An active memory already has path {columns.get('path')!r}") from None
    await memories.add_version(conn, ctx.workspace_id, memory, "created", ctx.principal.key_id)
    return Written(memory, created=True)


def creation_defaults(ctx: WriteContext, columns: dict[str, Any]) -> dict[str, Any]:
    """``columns`` with what a new memory takes that an update would not (a copy: the
    item's own columns stay as written, for the path that may write it next)."""
    created = {"tier": ctx.default_tier, **columns}
    # SPEC: last_used_at starts equal to first_seen_at. Only at creation: a sync that
    # sends a memory again with its firstSeenAt must not reset when it was last used.
    if "first_seen_at" in created:
        created.setdefault("last_used_at", created["first_seen_at"])
    return created


async def upsert(
    conn: asyncpg.Connection, ctx: WriteContext, existing: Memory, columns: dict[str, Any]
) -> Written:
    """Update the memory holding the identity; the caller can read it (``_write``), and a
    scope a key can read is one it may write into."""
    changes = changed(existing, columns)
    if "path" in changes:  # as on the Memory Store face: a memory's path is fixed at its write
        raise Invalid("path is immutable: write a new memory at the new path instead", param="path")
    if not changes:
        return Written(existing, upserted=True)
    try:
        async with conn.transaction():
            memory = await memories.update(conn, ctx.workspace_id, existing.id, changes)
    except asyncpg.UniqueViolationError:
        raise Conflict(f"An active memory already has path {columns.get('path')!r}") from None
    operation = version_operation(existing, memory)
    if operation is not None:
        await memories.add_version(conn, ctx.workspace_id, memory, operation, ctx.principal.key_id)
    return Written(memory, upserted=True)


# --- patch, delete, purge --------------------------------------------------------------------


async def patch(
    conn: asyncpg.Connection, ctx: WriteContext, memory_id: str, columns: dict[str, Any]
) -> Memory:
    """Change what ``columns`` set (``items.columns_of`` a patch: checked values)."""
    existing = await memories.get_readable(conn, ctx.principal, memory_id, for_update=True)
    if existing is None:
        raise NotFound(f"Memory {memory_id!r} not found")
    if "scope" in columns:
        check_writable_scope(ctx.principal, columns["scope"])
    if columns.get("speaker") is not None:
        store = await writable_store(conn, ctx, existing.store_id)
        await check_speaker(conn, ctx, store, columns["speaker"])
    changes = changed(existing, columns)
    if not changes:
        return existing
    changes |= lifted_retention(existing, changes)
    if "scope" in changes:
        await supersession.check_scope_change(conn, ctx.workspace_id, existing, changes["scope"])
    try:
        async with conn.transaction():
            memory = await memories.update(conn, ctx.workspace_id, existing.id, changes)
    except asyncpg.UniqueViolationError:
        # Restoring a deleted path-addressed memory whose path has been taken again.
        raise Conflict("An active memory already has this memory's path") from None
    operation = version_operation(existing, memory)
    if operation is not None:
        await memories.add_version(conn, ctx.workspace_id, memory, operation, ctx.principal.key_id)
    return memory


def lifted_retention(existing: Memory, changes: dict[str, Any]) -> dict[str, Any]:
    """A restore (archived to active) lifts what archived the memory, unless the same
    write sets it: an expiry already past is cleared, and a transitory memory counts as
    used now. Else the next retention pass would archive it again within minutes."""
    if existing.status != "archived" or changes.get("status") != "active":
        return {}
    lifted: dict[str, Any] = {}
    now = datetime.now(UTC)
    if "expires_at" not in changes and existing.expires_at and existing.expires_at <= now:
        lifted["expires_at"] = None
    if existing.transitory and not {"transitory", "last_used_at"} & changes.keys():
        lifted["last_used_at"] = now
    return lifted


async def delete(conn: asyncpg.Connection, ctx: WriteContext, memory_id: str) -> Memory:
    """Tombstone: status ``deleted``, kept for sync. Deleting twice changes nothing."""
    existing = await memories.get_readable(conn, ctx.principal, memory_id, for_update=True)
    if existing is None:
        raise NotFound(f"Memory {memory_id!r} not found")
    if existing.status == "deleted":
        return existing
    memory = await memories.update(conn, ctx.workspace_id, existing.id, {"status": "deleted"})
    await memories.add_version(conn, ctx.workspace_id, memory, "deleted", ctx.principal.key_id)
    return memory


async def purge(conn: asyncpg.Connection, ctx: WriteContext, memory_id: str) -> None:
    """Erase the memory, its media, vectors and versions for good."""
    existing = await memories.get_readable(conn, ctx.principal, memory_id, for_update=True)
    if existing is None:
        raise NotFound(f"Memory {memory_id!r} not found")
    await memories.purge(conn, ctx.workspace_id, existing.id)
