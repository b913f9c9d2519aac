"""The write engine: every way in (the write API, the Memory Store face, ``mneme import``,
the MCP door) writes memories with one call, ``apply`` or ``apply_in``, and gets back
what each item became (``Written``) or the first refusal (``service.problems``).

It takes checked values (``service.write.items.Batch``) and picks the executor: one
memory the short way (``single``: one or two statements, no explicit transaction) where
that keeps every rule; else, inside one transaction, set-based (``bulk``) when no item's
outcome can depend on another's, else one by one (``rules.write``).
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from service.write import bulk, rules, single
from service.write.items import Batch
from service.write.rules import WriteContext, Written


@dataclass(frozen=True)
class Pools:
    """Where writes go: the primary, and its connections that plan each statement once
    (``service.ops.db.PLANNED_ONCE_SETTINGS``), for statements whose plan never depends
    on their values."""

    primary: asyncpg.Pool
    planned_once: asyncpg.Pool


async def apply(pools: Pools, ctx: WriteContext, batch: Batch) -> list[Written]:
    """Write ``batch``, committed before this returns."""
    # A single write plans once; a batch's set-based statements are planned for its size
    # (generic plans took 20 % longer).
    pool = pools.primary if batch.batch else pools.planned_once
    async with pool.acquire() as conn:
        if not batch.batch and batch.refused is None:
            one = await single.create(conn, ctx, batch.items[0])
            if one is not None:
                return [one]
        async with conn.transaction():
            return await apply_in(conn, ctx, batch)


async def apply_in(conn: asyncpg.Connection, ctx: WriteContext, batch: Batch) -> list[Written]:
    """Write ``batch`` inside the caller's transaction (which an idempotent write shares
    with its stored answer). A refused item is raised after the items before it: if one
    of them fails, it decides; if none does, the raise undoes what they wrote."""
    written = await bulk.write_many(conn, ctx, batch.items, batch.labels)
    if written is None:  # the items depend on one another
        if len(batch.items) > 1:
            await rules.lock_batch(conn, ctx, batch.items)
        written = [
            await rules.write(conn, ctx, item, label=label)
            for item, label in zip(batch.items, batch.labels, strict=True)
        ]
    batch.raise_refused()
    return written
