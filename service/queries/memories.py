"""Memories, their versions, stores and speakers: the SQL of the write path.

Every read of a memory goes through ``mneme_readable`` (defined once, in the first
migration) with the caller's principal, so an unreadable memory is simply "not found".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import asyncpg

from service.ids import new_id
from service.queries import Conn
from service.queries.keys import Principal
from service.queries.named import NamedSQL


@dataclass(frozen=True)
class Store:
    id: str
    name: str
    description: str
    metadata: dict[str, str]
    strip_temporal: bool
    version: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class Memory:
    id: str
    store_id: str
    kind: str
    text: str
    media_type: str | None
    scope: str
    tier: str
    fact_type: str | None
    status: str
    provider: str
    provider_ref: str
    entity_refs: list[str]
    proof_count: int | None
    category: str
    importance: float
    speaker: str | None
    event_date: datetime | None
    superseded_by: str | None
    path: str | None
    metadata: dict[str, str]
    content_sha256: str
    content_size_bytes: int
    expires_at: datetime | None
    transitory: bool
    first_seen_at: datetime
    last_used_at: datetime
    created_at: datetime
    updated_at: datetime
    embedding_status: str


@dataclass(frozen=True)
class Version:
    id: str
    operation: str
    actor: str | None
    content_sha256: str | None
    path: str | None
    status: str
    created_at: datetime
    text: str | None


# A memory's last_used_at, for a row ``m`` of memories: the later of its own column (set
# at creation or by a write) and the last time a search returned it (memory_uses, kept
# apart so that stamping it does not rewrite the memory's wide row: 0005_memory_uses.sql).
LAST_USED_AT = """greatest(m.last_used_at, (
    SELECT u.last_used_at FROM memory_uses u
    WHERE u.workspace_id = m.workspace_id AND u.memory_id = m.id))"""

MEMORY_COLUMNS = f"""
m.id, m.store_id, m.kind, m.text, m.media_type, m.scope, m.tier, m.fact_type, m.status,
m.provider, m.provider_ref, m.entity_refs, m.proof_count, m.category, m.importance,
m.speaker, m.event_date, m.superseded_by, m.path, m.metadata, m.content_sha256,
m.content_size_bytes, m.expires_at, m.transitory, m.first_seen_at,
{LAST_USED_AT} AS last_used_at, m.created_at, m.updated_at, m.embedding_status
"""

# The columns a write may set, by name; updates are built only from these constants.
WRITABLE = (
    "text",
    "kind",
    "media",
    "media_type",
    "scope",
    "tier",
    "fact_type",
    "status",
    "provider",
    "provider_ref",
    "entity_refs",
    "proof_count",
    "category",
    "importance",
    "speaker",
    "event_date",
    "path",
    "metadata",
    "content_sha256",
    "content_size_bytes",
    "expires_at",
    "transitory",
    "first_seen_at",
    "last_used_at",
)
# Each writable column's type, for a parameter that sets it.
COLUMN_TYPES = {
    "text": "text",
    "kind": "text",
    "media": "bytea",
    "media_type": "text",
    "scope": "text",
    "tier": "text",
    "fact_type": "text",
    "status": "text",
    "provider": "text",
    "provider_ref": "text",
    "entity_refs": "text[]",
    "proof_count": "int4",
    "category": "text",
    "importance": "float8",
    "speaker": "text",
    "event_date": "timestamptz",
    "path": "text",
    "metadata": "jsonb",
    "content_sha256": "text",
    "content_size_bytes": "int4",
    "expires_at": "timestamptz",
    "transitory": "bool",
    "first_seen_at": "timestamptz",
    "last_used_at": "timestamptz",
}
assert set(COLUMN_TYPES) == set(WRITABLE)
# Changing these changes what is embedded.
EMBEDDED = frozenset({"text", "speaker"})


def _memory(row: asyncpg.Record) -> Memory:
    return Memory(**dict(row.items()))


# --- stores and speakers ------------------------------------------------------------------

# For a row of stores (unaliased); the version is kept apart (0008_store_versions.sql).
STORE_COLUMNS = """
id, name, description, metadata, strip_temporal,
coalesce((SELECT v.version FROM store_versions v
          WHERE v.workspace_id = stores.workspace_id AND v.store_id = stores.id), 0) AS version,
created_at, updated_at
"""


def store_named(workspace: str, ref: str) -> str:
    """The clauses, after ``FROM stores``, that find the store ``ref`` names: its
    ``memstore_…`` id (exact) or its name (case-insensitive), for the placeholders given."""
    return f"""
WHERE stores.workspace_id = {workspace}
  AND (stores.id = {ref} OR lower(stores.name) = lower({ref}))
ORDER BY stores.id = {ref} DESC
LIMIT 1
"""


# The store :ref names in workspace :workspace: a statement of its own, and a part of
# service.queries.search's store-and-profile statement.
SELECT_STORE = f"SELECT {STORE_COLUMNS} FROM stores {store_named(':workspace', ':ref')}"

RESOLVE_STORE = NamedSQL(SELECT_STORE)

# For a write: the store's row stays until the writer commits (a delete of the store waits
# for it, then deletes what it wrote), where the memory's foreign key, checked later, would
# fail if the store were deleted in between.
SELECT_STORE_FOR_WRITE = NamedSQL(SELECT_STORE + "FOR KEY SHARE OF stores")


async def resolve_store(
    conn: Conn, workspace_id: str, ref: str, *, for_write: bool = False
) -> Store | None:
    """A store by its ``memstore_…`` id (exact) or its name (case-insensitive);
    ``for_write`` keeps it from being deleted until the transaction ends."""
    statement = SELECT_STORE_FOR_WRITE if for_write else RESOLVE_STORE
    row = await statement.fetchrow(conn, workspace=workspace_id, ref=ref)
    return None if row is None else Store(**row)


SELECT_SPEAKERS = NamedSQL("""
SELECT 'me' AS name, s.created_at FROM stores s WHERE s.workspace_id = :workspace AND s.id = :store
UNION ALL
SELECT name, created_at FROM (
    SELECT name, created_at FROM speakers WHERE workspace_id = :workspace AND store_id = :store
    ORDER BY name
) registered
""")


async def list_speakers(conn: Conn, workspace_id: str, store_id: str) -> list[tuple[str, datetime]]:
    rows = await SELECT_SPEAKERS.fetch(conn, workspace=workspace_id, store=store_id)
    return [(r["name"], r["created_at"]) for r in rows]


# Registrations to one store take turns on its row, so each counts the speakers the one
# before it added and none goes past the limit. FOR NO KEY UPDATE: the writers of the
# store's memories hold a key-share lock on it (SELECT_STORE_FOR_WRITE), which this lock
# neither waits for nor blocks.
LOCK_STORE_FOR_SPEAKERS = NamedSQL("""
SELECT 1 FROM stores WHERE workspace_id = :workspace AND id = :store FOR NO KEY UPDATE
""")

# Counted in a statement after the lock: one statement sees the rows committed when it
# started, before the lock's wait ended.
INSERT_SPEAKER = NamedSQL("""
WITH held AS (
    SELECT count(*) AS n,
           EXISTS (SELECT 1 FROM speakers WHERE workspace_id = :workspace
                   AND store_id = :store AND name = :name) AS registered
    FROM speakers WHERE workspace_id = :workspace AND store_id = :store
), added AS (
    INSERT INTO speakers (workspace_id, store_id, name)
    SELECT :workspace, :store, :name FROM held WHERE NOT held.registered AND held.n < :limit
    ON CONFLICT DO NOTHING
    RETURNING created_at
)
SELECT held.n, held.registered, added.created_at FROM held LEFT JOIN added ON true
""")


@dataclass(frozen=True)
class SpeakerAdded:
    """What registering a speaker did: ``added`` (at ``created_at``); or nothing, since
    the name is registered already (``exists``), the store has ``limit`` speakers
    (``full``) or the store is gone."""

    outcome: Literal["added", "exists", "full", "no store"]
    created_at: datetime | None = None


async def add_speaker(
    conn: Conn, workspace_id: str, store_id: str, name: str, *, limit: int
) -> SpeakerAdded:
    """Register ``name`` in the store unless it has ``limit`` speakers (``me`` aside): on a
    connection of the caller's (an import's), or one of ``conn`` when it is a pool."""
    if isinstance(conn, asyncpg.Pool):
        async with conn.acquire() as own:
            return await add_speaker(own, workspace_id, store_id, name, limit=limit)
    async with conn.transaction():
        values = {"workspace": workspace_id, "store": store_id}
        if await LOCK_STORE_FOR_SPEAKERS.fetchval(conn, **values) is None:
            return SpeakerAdded("no store")
        row = await INSERT_SPEAKER.fetchrow(conn, **values, name=name, limit=limit)
    assert row is not None  # held: always one row
    if row["created_at"] is not None:
        return SpeakerAdded("added", row["created_at"])
    full = row["n"] >= limit and not row["registered"]
    return SpeakerAdded("full" if full else "exists")


DELETE_SPEAKER = NamedSQL("""
DELETE FROM speakers WHERE workspace_id = :workspace AND store_id = :store AND name = :name
RETURNING name
""")


async def delete_speaker(conn: Conn, workspace_id: str, store_id: str, name: str) -> bool:
    found = await DELETE_SPEAKER.fetchval(conn, workspace=workspace_id, store=store_id, name=name)
    return found is not None


SPEAKER_EXISTS = NamedSQL("""
SELECT EXISTS (SELECT 1 FROM speakers
               WHERE workspace_id = :workspace AND store_id = :store AND name = :name)
""")


async def speaker_exists(conn: Conn, workspace_id: str, store_id: str, name: str) -> bool:
    if name == "me":
        return True
    found = await SPEAKER_EXISTS.fetchval(conn, workspace=workspace_id, store=store_id, name=name)
    return bool(found)


# --- reading one memory ---------------------------------------------------------------------


def readable_by(principal: Principal) -> dict[str, object]:
    """The values of ``mneme_readable(scope, :is_service, :member, :rooms)`` for a caller,
    with its ``:workspace``."""
    return {
        "workspace": principal.workspace_id,
        "is_service": principal.is_service,
        "member": principal.member,
        "rooms": principal.rooms,
    }


_SELECT_READABLE = f"""
SELECT {MEMORY_COLUMNS} FROM memories m
WHERE m.workspace_id = :workspace AND m.id = :id
  AND mneme_readable(m.scope, :is_service, :member, :rooms)
"""
SELECT_READABLE = NamedSQL(_SELECT_READABLE)
SELECT_READABLE_FOR_UPDATE = NamedSQL(_SELECT_READABLE + " FOR UPDATE")


async def get_readable(
    conn: Conn, principal: Principal, memory_id: str, *, for_update: bool = False
) -> Memory | None:
    statement = SELECT_READABLE_FOR_UPDATE if for_update else SELECT_READABLE
    row = await statement.fetchrow(conn, id=memory_id, **readable_by(principal))
    return None if row is None else _memory(row)


SELECT_READABLE_MANY = NamedSQL(f"""
SELECT {MEMORY_COLUMNS} FROM memories m
WHERE m.workspace_id = :workspace AND m.id = ANY (:ids::text[])
  AND mneme_readable(m.scope, :is_service, :member, :rooms)
""")


async def get_readable_many(conn: Conn, principal: Principal, ids: list[str]) -> dict[str, Memory]:
    """Those of ``ids`` the caller may read, by id (what ``get_readable`` finds, at once)."""
    rows = await SELECT_READABLE_MANY.fetch(conn, ids=ids, **readable_by(principal))
    return {m.id: m for m in map(_memory, rows)}


SELECT_MEDIA = NamedSQL("""
SELECT m.media, m.media_type FROM memories m
WHERE m.workspace_id = :workspace AND m.id = :id
  AND mneme_readable(m.scope, :is_service, :member, :rooms)
  AND m.media IS NOT NULL
""")


async def get_media(conn: Conn, principal: Principal, memory_id: str) -> tuple[bytes, str] | None:
    row = await SELECT_MEDIA.fetchrow(conn, id=memory_id, **readable_by(principal))
    return None if row is None else (bytes(row["media"]), row["media_type"])


SELECT_BY_PROVIDER_REF = NamedSQL(f"""
SELECT {MEMORY_COLUMNS}, mneme_readable(m.scope, :is_service, :member, :rooms) AS readable
FROM memories m
WHERE m.workspace_id = :workspace AND m.store_id = :store AND m.provider = :provider
  AND m.provider_ref = :provider_ref
FOR UPDATE
""")


@dataclass(frozen=True)
class Holder:
    """The memory that holds a sync identity, if the caller may read it."""

    memory: Memory | None  # None: held by a memory the caller cannot read


async def by_provider_ref(
    conn: Conn, principal: Principal, store_id: str, provider: str, provider_ref: str
) -> Holder | None:
    """Who holds (store, provider, providerRef): ``None`` when nobody does."""
    row = await SELECT_BY_PROVIDER_REF.fetchrow(
        conn, store=store_id, provider=provider, provider_ref=provider_ref, **readable_by(principal)
    )
    if row is None:
        return None
    values = dict(row.items())
    readable = values.pop("readable")
    return Holder(Memory(**values) if readable else None)


def duplicate_rule(store: str, sha256: str, scope: str, speaker: str, text: str, media: str) -> str:
    """The exact-duplicate rule (SPEC §3.1, §8) over ``m``, given each value's SQL: an
    active memory without a path, of the same store, scope, speaker and text, and the same
    media (an image's bytes; none for a text), so that a picture is never folded into
    another picture, or into a text, that shares its caption. Every write path (single,
    batch, item by item) looks for a duplicate with this clause."""
    return f"""m.workspace_id = :workspace AND m.store_id = {store}
  AND m.content_sha256 = {sha256} AND m.status = 'active' AND m.path IS NULL
  AND m.scope = {scope} AND m.speaker IS NOT DISTINCT FROM {speaker} AND m.text = {text}
  AND m.media IS NOT DISTINCT FROM {media}"""


SELECT_DUPLICATE = NamedSQL(f"""
SELECT {MEMORY_COLUMNS} FROM memories m
WHERE {duplicate_rule(":store", ":sha256", ":scope", ":speaker", ":text", ":media::bytea")}
ORDER BY m.id
LIMIT 1
FOR UPDATE
""")


async def find_duplicate(
    conn: Conn,
    workspace_id: str,
    store_id: str,
    sha256: str,
    scope: str,
    speaker: str | None,
    text: str,
    media: bytes | None,
) -> Memory | None:
    row = await SELECT_DUPLICATE.fetchrow(
        conn,
        workspace=workspace_id,
        store=store_id,
        sha256=sha256,
        scope=scope,
        speaker=speaker,
        text=text,
        media=media,
    )
    return None if row is None else _memory(row)


# An identity a write decides (service.write.rules.identity_of): workspace, store, provider or
# '', providerRef or text sha256.
Identity = tuple[str, str, str, str]

# In one order (by lock id) whatever order the identities come in: two transactions
# locking overlapping sets cannot each hold one the other waits for. The key is
# mneme_identity_key (0011), the one a write made in one statement locks too.
LOCK_IDENTITIES = NamedSQL("""
SELECT count(pg_advisory_xact_lock(k)) FROM (
    SELECT DISTINCT mneme_identity_key(ws, store, provider, ref) AS k
    FROM unnest(:workspaces::text[], :stores::text[], :providers::text[], :refs::text[])
        AS v(ws, store, provider, ref)
    ORDER BY k
) ordered
""")


async def lock_identities(conn: asyncpg.Connection, identities: list[Identity]) -> None:
    """Serialise writes that would decide the same identity (dedupe, upsert) until commit."""
    if identities:
        workspaces, stores, providers, refs = (list(p) for p in zip(*identities, strict=True))
        await LOCK_IDENTITIES.execute(
            conn, workspaces=workspaces, stores=stores, providers=providers, refs=refs
        )


# --- writing ------------------------------------------------------------------------------


@functools.cache
def insert_statement(columns: tuple[str, ...]) -> NamedSQL:
    """Inserts a memory that sets ``columns`` (each given by its own name)."""
    return NamedSQL(
        f"INSERT INTO memories AS m (workspace_id, id, store_id, {', '.join(columns)}) "
        f"VALUES (:workspace, :id, :store, {', '.join(f':{c}' for c in columns)}) "
        f"RETURNING {MEMORY_COLUMNS}"
    )


async def insert(
    conn: asyncpg.Connection, workspace_id: str, store_id: str, fields: dict[str, Any]
) -> Memory:
    columns = [c for c in WRITABLE if c in fields]
    unknown = set(fields) - set(WRITABLE)
    assert not unknown, unknown
    memory_id = new_id("mem")
    if "provider_ref" not in fields:
        columns.append("provider_ref")
        fields = {**fields, "provider_ref": memory_id}
    statement = insert_statement(tuple(columns))
    row = await statement.fetchrow(
        conn, workspace=workspace_id, id=memory_id, store=store_id, **fields
    )
    assert row is not None
    return _memory(row)


@functools.cache
def update_statement(columns: tuple[str, ...]) -> NamedSQL:
    """Sets ``columns`` (each given by its own name); re-queues the memory for embedding
    when what is embedded changes."""
    sets = [f"{c} = :{c}" for c in columns]
    sets.append("updated_at = now()")
    if "text" in columns:
        sets.append("text_tokens = NULL")  # counted again by the worker
    if EMBEDDED & set(columns):
        # The old vector (and chunks) spoke for a text the memory no longer has: until the
        # worker encodes the new one, the memory is found by its words only, as a new one
        # is, and never by the meaning of what an edit took out.
        sets += [
            "embedding = NULL",
            "chunked = false",
            "embedding_generation = m.embedding_generation + 1",
            "embedding_status = 'pending'",
            "embedding_attempts = 0",
            "embedding_error = NULL",
            "embedding_lease_until = NULL",
            "embedding_background = false",  # an edit goes ahead of a re-embedding
        ]
    return NamedSQL(
        f"UPDATE memories AS m SET {', '.join(sets)} "
        f"WHERE m.workspace_id = :workspace AND m.id = :id RETURNING {MEMORY_COLUMNS}"
    )


async def update(
    conn: asyncpg.Connection, workspace_id: str, memory_id: str, changes: dict[str, Any]
) -> Memory:
    """Set the given columns; re-queue for embedding when what is embedded changed."""
    columns = tuple(c for c in WRITABLE if c in changes)
    assert set(changes) == set(columns), set(changes) - set(columns)
    if "last_used_at" in changes:  # a value given by the writer is the one read back
        await FORGET_USES.execute(conn, workspace=workspace_id, id=memory_id)
    row = await update_statement(columns).fetchrow(
        conn, workspace=workspace_id, id=memory_id, **changes
    )
    assert row is not None
    return _memory(row)


FORGET_USES = NamedSQL(
    "DELETE FROM memory_uses WHERE workspace_id = :workspace AND memory_id = :id"
)

BUMP_PROOF = NamedSQL(f"""
UPDATE memories AS m SET proof_count = coalesce(m.proof_count, 1) + 1, updated_at = now()
WHERE m.workspace_id = :workspace AND m.id = :id
RETURNING {MEMORY_COLUMNS}
""")


async def bump_proof(conn: asyncpg.Connection, workspace_id: str, memory_id: str) -> Memory:
    row = await BUMP_PROOF.fetchrow(conn, workspace=workspace_id, id=memory_id)
    assert row is not None
    return _memory(row)


# The scopes at the two ends of a memory's supersession links (service.write.supersession):
# the memory that replaced it, and those it replaced (memories_superseded_by, 0019).
SUPERSESSION_SCOPES = NamedSQL("""
SELECT (SELECT scope FROM memories WHERE workspace_id = :workspace AND id = :superseder)
           AS superseder,
       ARRAY(SELECT DISTINCT scope FROM memories
             WHERE workspace_id = :workspace AND superseded_by = :id) AS superseded
""")


@dataclass(frozen=True)
class SupersessionScopes:
    superseder: str | None  # the scope of the memory that replaced it
    superseded: list[str]  # the scopes of the memories it replaced


async def supersession_scopes(
    conn: asyncpg.Connection, workspace_id: str, memory: Memory
) -> SupersessionScopes:
    row = await SUPERSESSION_SCOPES.fetchrow(
        conn, workspace=workspace_id, id=memory.id, superseder=memory.superseded_by
    )
    assert row is not None
    return SupersessionScopes(row["superseder"], list(row["superseded"]))


SET_SUPERSEDED = NamedSQL(f"""
UPDATE memories AS m SET superseded_by = :by, updated_at = now()
WHERE m.workspace_id = :workspace AND m.id = :id
RETURNING {MEMORY_COLUMNS}
""")


async def set_superseded(
    conn: asyncpg.Connection, workspace_id: str, memory_id: str, by: str
) -> Memory:
    row = await SET_SUPERSEDED.fetchrow(conn, workspace=workspace_id, id=memory_id, by=by)
    assert row is not None
    return _memory(row)


# The row goes with its media, chunks' vectors and versions (cascade); so do the copies of
# it elsewhere: idempotency answers and cached search answers that hold it. A memory it
# superseded is superseded by nothing any more (the trigger of 0022_superseder_gone.sql).
PURGE = NamedSQL("""
WITH gone AS (
    DELETE FROM memories WHERE workspace_id = :workspace AND id = :id RETURNING store_id
), replays AS (
    DELETE FROM idempotency_keys WHERE workspace_id = :workspace AND :id = ANY(memory_ids)
), answers AS (
    DELETE FROM search_cache WHERE workspace_id = :workspace AND :id = ANY(memory_ids)
)
SELECT store_id FROM gone
""")


async def purge(conn: asyncpg.Connection, workspace_id: str, memory_id: str) -> str | None:
    """Erase the row, its media, vectors, versions and every copy of it for good; returns
    its store id."""
    store_id: str | None = await PURGE.fetchval(conn, workspace=workspace_id, id=memory_id)
    return store_id


# --- versions -----------------------------------------------------------------------------


def version_rows(version_id: str, operation: str, source: str) -> str:
    """The one statement that writes version rows (the audit trail): one per memory row
    of ``source`` (aliased ``c``), as that row is now. The write path's statements embed
    it (``queries.single``, ``queries.bulk``); ``add_version`` runs it alone."""
    return f"""
INSERT INTO memory_versions (workspace_id, id, memory_id, operation, actor, text, metadata,
                             content_sha256, path, status, scope)
SELECT :workspace, {version_id}, c.id, {operation}, :actor, c.text, c.metadata,
       c.content_sha256, c.path, c.status, c.scope
FROM {source}"""


INSERT_VERSION = NamedSQL(
    version_rows(":id", ":operation", "memories c")
    + "\nWHERE c.workspace_id = :workspace AND c.id = :memory_id"
)


async def add_version(
    conn: asyncpg.Connection, workspace_id: str, memory: Memory, operation: str, actor: str | None
) -> None:
    """A version row for ``memory`` as it now stands (in the caller's transaction)."""
    await INSERT_VERSION.execute(
        conn,
        workspace=workspace_id,
        id=new_id("memver"),
        memory_id=memory.id,
        operation=operation,
        actor=actor,
    )


# What a version says of the content (its text, the text's sha256, its path) only where
# the caller could read the version in its scope (0020): a sha256 would let a reader
# confirm a guess of a short text offline. A version from before the scope was recorded
# counts as in the memory's scope now.
SELECT_VERSIONS = NamedSQL("""
SELECT v.id, v.operation, v.actor, v.status, v.created_at,
       CASE WHEN seen.readable THEN v.content_sha256 END AS content_sha256,
       CASE WHEN seen.readable THEN v.path END AS path,
       CASE WHEN seen.readable THEN v.text END AS text
FROM memory_versions v
JOIN memories m ON m.workspace_id = v.workspace_id AND m.id = v.memory_id
CROSS JOIN LATERAL (
    SELECT mneme_readable(coalesce(v.scope, m.scope), :is_service, :member, :rooms) AS readable
) seen
WHERE v.workspace_id = :workspace AND v.memory_id = :memory_id
  AND v.id < :before   -- keyset; VERSIONS_FROM_THE_TOP on the first page
ORDER BY v.id DESC
LIMIT :limit
""")
# Above every version id (ids are a prefix and lowercase base32, whose greatest digit is
# z): the first page's bound, a real value so that it stays an index bound.
VERSIONS_FROM_THE_TOP = "memver_" + "z" * 20


async def list_versions(
    conn: Conn, principal: Principal, memory_id: str, before: str | None, limit: int
) -> tuple[list[Version], bool]:
    """A page of a memory's versions, newest first (by id, which sorts by time): at most
    ``limit`` older than the version ``before``; and whether more follow. The caller reads
    the memory: checked before."""
    rows = await SELECT_VERSIONS.fetch(
        conn,
        memory_id=memory_id,
        before=VERSIONS_FROM_THE_TOP if before is None else before,
        limit=limit + 1,
        **readable_by(principal),
    )
    return [Version(**r) for r in rows[:limit]], len(rows) > limit


# --- retention ----------------------------------------------------------------------------

ARCHIVE_DUE = NamedSQL(f"""
WITH due AS (
    SELECT m.workspace_id, m.id FROM memories m
    WHERE m.status = 'active'
      AND ((m.expires_at IS NOT NULL AND m.expires_at <= now())
           OR (m.transitory AND {LAST_USED_AT} < now() - make_interval(secs => :idle_s)))
    ORDER BY m.workspace_id, m.id
    LIMIT :limit
    FOR UPDATE OF m SKIP LOCKED
)
UPDATE memories m SET status = 'archived', updated_at = now()
FROM due WHERE m.workspace_id = due.workspace_id AND m.id = due.id
RETURNING m.workspace_id, {MEMORY_COLUMNS}
""")


async def archive_due(
    conn: asyncpg.Connection, transitory_idle_s: float, limit: int = 1000
) -> list[tuple[str, Memory]]:
    """Archive expired memories and idle transitory ones (one batch); returns them."""
    rows = await ARCHIVE_DUE.fetch(conn, idle_s=transitory_idle_s, limit=limit)
    out = []
    for r in rows:
        values = dict(r.items())
        workspace_id = values.pop("workspace_id")
        out.append((workspace_id, Memory(**values)))
    return out
