"""Who may see a correction: the scope rule of ``supersedes``.

A superseded memory sinks in search and names its replacement (``supersededBy``), so
everyone who reads it must be able to read what replaced it; otherwise a reader would see
a fact demoted by, and the id of, a memory the one readability rule hides from them. A
memory may therefore supersede only one of its own scope, unless it is in ``workspace``
(which every member reads). The rule is kept at both ends: when a write supersedes, and
when a PATCH moves a memory that supersedes or is superseded to another scope.
"""

from __future__ import annotations

import asyncpg

from service.problems import Invalid
from service.queries import memories
from service.queries.memories import Memory


def covers(replacement: str, replaced: str) -> bool:
    """Whether every reader of scope ``replaced`` reads scope ``replacement``."""
    return replacement in ("workspace", replaced)


def check_supersedes(replacement: Memory, replaced: Memory) -> None:
    """A write's ``supersedes``: the writer reads both, so naming the scopes is safe."""
    if not covers(replacement.scope, replaced.scope):
        raise Invalid(
            f"A memory in scope {replacement.scope!r} cannot supersede one in another "
            "scope: its readers would not see the replacement. Write the replacement in "
            "the scope of the memory it supersedes or in 'workspace'",
            param="supersedes",
        )


async def check_scope_change(
    conn: asyncpg.Connection, workspace_id: str, memory: Memory, scope: str
) -> None:
    """A PATCH of ``scope``: the links of ``memory`` must still hold (the other memory may
    be unreadable to the caller, so the message names neither it nor its scope)."""
    links = await memories.supersession_scopes(conn, workspace_id, memory)
    if links.superseder is not None and not covers(links.superseder, scope):
        raise Invalid(
            "scope: the memory that supersedes this one would not be readable by all of "
            "its readers there",
            param="scope",
        )
    if any(not covers(scope, replaced) for replaced in links.superseded):
        raise Invalid(
            "scope: this memory supersedes a memory whose readers would not all read it there",
            param="scope",
        )
