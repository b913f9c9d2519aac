"""One new memory, written in as few round trips as the write rules allow.

The general path (``service.write.engine.apply_in``) takes seven round trips for one memory:
BEGIN, the store, its speakers, the identity lock, the holder or duplicate, the insert,
COMMIT. A single write without an Idempotency-Key, a path or ``supersedes`` — what an
agent sends on every turn — keeps every rule in fewer:

- **with a providerRef**, one statement and its own transaction: the store (key-share
  locked), the speaker, the identity lock, and the insert, which the sync identity's
  unique index lets through only if nobody holds the identity. When somebody does (an
  upsert, or a memory the caller cannot read), nothing is written and the general path
  decides, as it always did.
- **without**, a transaction of two statements: the store, the speaker and the lock on
  the text, then one more proof for a duplicate or the insert. The duplicate rule must
  look after the lock is held, and a statement sees only what was committed before it
  began, so the lock cannot share the second statement.

A refusal is the general path's, word for word. Whatever this path does not cover (a
scope the key cannot write into, no text) is left to the general path untouched.
"""

from __future__ import annotations

import asyncpg

from service.queries import single
from service.write import rules
from service.write.rules import NewMemory, WriteContext, Written


async def create(conn: asyncpg.Connection, ctx: WriteContext, new: NewMemory) -> Written | None:
    """Write ``new`` (a connection outside any transaction), or ``None``: nothing was
    written, and the general path is to write it."""
    columns, store = new.columns, new.store_ref
    if (
        "text" not in columns
        or "path" in columns
        or new.supersedes is not None
        or not new.storable()
        or new.refusal(ctx.principal) is not None
    ):
        return None
    columns = rules.creation_defaults(ctx, columns)
    actor = ctx.principal.key_id
    speaker = columns.get("speaker")
    if "provider_ref" in columns:
        outcome = await single.create_synced(
            conn, ctx.workspace_id, actor, store, columns, new.provider
        )
        if outcome.store_id is None or outcome.store_name is None:
            raise rules.store_not_found(store)
        if not outcome.speaker_known:
            assert speaker is not None
            raise rules.unregistered_speaker(outcome.store_id, outcome.store_name, speaker)
        if outcome.memory is None:
            return None  # the identity is held: an upsert, or a refusal
        return Written(outcome.memory, created=True)
    async with conn.transaction():
        found = await single.store_and_lock(
            conn, ctx.workspace_id, store, speaker, columns["content_sha256"]
        )
        if found is None:
            raise rules.store_not_found(store)
        store_id, store_name, speaker_known = found
        if not speaker_known:
            assert speaker is not None
            raise rules.unregistered_speaker(store_id, store_name, speaker)
        memory, created = await single.create_plain(
            conn, ctx.workspace_id, actor, store_id, columns, new.scope
        )
    return Written(memory, created=created, deduplicated=not created)
