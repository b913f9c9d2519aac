"""``POST /api/v1/erasures`` and ``mneme erase``: the one way a person is erased."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from service.problems import Invalid, NotFound
from service.queries import erasure, memories
from service.queries.erasure import Erased


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
            erased = await erasure.erase_member(conn, workspace_id, target.member)
            if erased is None:
                raise NotFound(f"Member {target.member!r} not found")
            return erased
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
