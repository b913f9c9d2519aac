"""Leases (0014_leases.sql): which instance does the work one instance at a time should."""

from __future__ import annotations

from service.queries import Conn
from service.queries.named import NamedSQL

# Taken when free or run out, renewed by its holder; anyone else gets nothing back.
TAKE = NamedSQL("""
INSERT INTO leases AS l (name, holder, until)
VALUES (:name, :holder, clock_timestamp() + make_interval(secs => :seconds))
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until = excluded.until
WHERE l.holder = excluded.holder OR l.until < clock_timestamp()
RETURNING holder
""")

RELEASE = NamedSQL("DELETE FROM leases WHERE name = :name AND holder = :holder")


async def take(conn: Conn, name: str, holder: str, seconds: float) -> bool:
    """Whether ``holder`` holds lease ``name`` for the next ``seconds`` (taken or renewed)."""
    taken = await TAKE.fetchval(conn, name=name, holder=holder, seconds=float(seconds))
    return taken is not None


async def release(conn: Conn, name: str, holder: str) -> None:
    """Give lease ``name`` up, if ``holder`` holds it (so another instance need not wait)."""
    await RELEASE.execute(conn, name=name, holder=holder)
