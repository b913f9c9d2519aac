"""First run: the ``default`` workspace (tier ``scale``) and its first service key.

Runs at every start and is idempotent. The workspace is created at most once, even by
several instances starting together (``INSERT … ON CONFLICT DO NOTHING`` decides who).
Whoever creates it also creates a service key and announces it once (``mneme serve``
prints it in a box when the service is ready) — unless ``MNEME_BOOTSTRAP_KEY`` is set,
in which case that key is registered instead (and on later starts too, if it is not
registered yet).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import asyncpg

from service.queries import keys, tenancy

log = logging.getLogger("mneme.bootstrap")

DEFAULT_WORKSPACE = "default"
ALL_SCOPES = list(keys.SCOPES)
SHORT_KEY = 16  # characters: below this, a guessable bootstrap key is worth a warning


async def bootstrap(
    conn: asyncpg.Connection, bootstrap_key: str | None, announce: Callable[[str], None]
) -> None:
    created = await tenancy.create_workspace(conn, DEFAULT_WORKSPACE, "scale")
    workspace = created or await tenancy.workspace_by_name(conn, DEFAULT_WORKSPACE)
    assert workspace is not None
    if bootstrap_key is not None:
        await _register(conn, workspace.id, bootstrap_key)
    elif created is not None:
        _, secret = await keys.create_key(
            conn,
            workspace.id,
            kind="service",
            member=None,
            scopes=ALL_SCOPES,
            name="first-run",
        )
        announce(secret)


async def _register(conn: asyncpg.Connection, workspace_id: str, secret: str) -> None:
    """``MNEME_BOOTSTRAP_KEY`` as the workspace's service key, unless it is registered:
    by an earlier start, or by a replica starting beside this one (the unique index on
    the key's hash decides, and the loser reads who won)."""
    owner = await keys.key_workspace(conn, secret)
    if owner is None:
        try:
            await keys.create_key(
                conn,
                workspace_id,
                kind="service",
                member=None,
                scopes=ALL_SCOPES,
                name="bootstrap",
                secret=secret,
            )
        except asyncpg.UniqueViolationError:
            owner = await keys.key_workspace(conn, secret)
        else:
            log.info("registered MNEME_BOOTSTRAP_KEY as the default workspace's service key")
    if owner is not None and owner != workspace_id:
        log.warning("MNEME_BOOTSTRAP_KEY is registered in another workspace; left as it is")
    if len(secret) < SHORT_KEY:
        log.warning(
            "MNEME_BOOTSTRAP_KEY is shorter than %d characters: an admin key that can be "
            "guessed; use a long random one (openssl rand -hex 24)",
            SHORT_KEY,
        )


def first_key_box(secret: str) -> str:
    """The one-time key, framed so that it stands out in a terminal full of start-up
    output (plain ASCII: any terminal's encoding can show it)."""
    lines = [
        "Mneme created the 'default' workspace. Its service key is shown",
        "only this once: store it now (more keys: `mneme keys create`).",
        "",
        f"    {secret}",
    ]
    width = max(len(line) for line in lines)
    rule = "+" + "-" * (width + 4) + "+"
    return "\n".join([rule, *(f"|  {line.ljust(width)}  |" for line in lines), rule])


def print_first_key(secret: str) -> None:
    print(first_key_box(secret), flush=True)
