"""Leases (0014_leases.sql): which instance does the work one instance at a time should."""

from __future__ import annotations

from service.queries import Conn

# Taken when free or run out, renewed by its holder; anyone else gets nothing back.
TAKE = """
INSERT INTO leases AS l (name, holder, until)
VALUES ($1, $2, clock_timestamp() + make_interval(secs => $3))
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until = excluded.until
WHERE l.holder = excluded.holder OR l.until < clock_timestamp()
RETURNING holder
"""

RELEASE = "DELETE FROM leases WHERE name = $1 AND holder = $2"


async def take(conn: Conn, name: str, holder: str, seconds: float) -> bool:
    """Whether ``holder`` holds lease ``name`` for the next ``seconds`` (taken or renewed)."""
    return await conn.fetchval(TAKE, name, holder, float(seconds)) is not None


async def release(conn: Conn, name: str, holder: str) -> None:
    """Give lease ``name`` up, if ``holder`` holds it (so another instance need not wait)."""
    await conn.execute(RELEASE, name, holder)
