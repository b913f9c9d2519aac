"""The dispatcher: sends every webhook delivery the outbox holds, until it is a 2xx.

One replica at a time sends (the ``webhooks`` lease, as the janitor's); a pass claims
the deliveries due (each put off by ``IN_FLIGHT_S`` as it is claimed, so that one lost
with its process is sent again after that), renders each event for its webhook's key,
sends them at once, and records what came back: a 2xx is delivered; anything else, or
no answer within 10 s, is tried again after an exponential backoff with jitter (10 s,
20 s, 40 s, … at most an hour apart) until 24 h have passed, then failed. At least
once: a receiver may see an event twice (the ``Mneme-Event-Id`` tells), and the order
of events is not promised (each memory carries its ``updatedAt``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import asyncpg
import msgspec
from aiohttp import web

from service.app_keys import METRICS, OUTAGE, POOL, SETTINGS
from service.faces.render import memory_object
from service.queries import keys, leases, memories, webhooks
from service.queries.keys import Principal
from service.queries.memories import Memory
from service.queries.named import NamedSQL
from service.queries.webhooks import Due, Outcome
from service.times import iso
from service.webhooks import outbound
from service.webhooks.signing import signature

log = logging.getLogger("mneme.webhooks")

LEASE = "webhooks"
LEASE_S = 30.0  # renewed every RENEW_S, so a pass (sends time out at 10 s) never outlives it
RENEW_S = 5.0
POLL_S = 0.25
BATCH = 64
IN_FLIGHT_S = outbound.TIMEOUT_S + 5
BACKOFF_BASE_S = 10.0
BACKOFF_MAX_S = 3600.0
USER_AGENT = "Mneme-Webhooks/1"

_encoder = msgspec.json.Encoder()

# Which of a list of scopes a reader may read (a memory.deleted's memory is gone).
SCOPES_READABLE = NamedSQL("""
SELECT array_agg(s) FILTER (WHERE mneme_readable(s, :is_service, :member, :rooms))
FROM unnest(:scopes::text[]) s
""")


def backoff_s(attempts: int) -> float:
    """Before the next try, after ``attempts`` (1 or more): doubling from 10 s up to an
    hour, each drawn between half and all of that (so endpoints that came back at once
    are not all tried again at the same instant)."""
    ceiling = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2.0 ** min(attempts - 1, 20))
    return ceiling * (0.5 + random.random() / 2)  # noqa: S311 - jitter, not a secret


def payload(due: Due, memory: Memory | None, readable_scope: bool) -> bytes | None:
    """The body sent for ``due``: its memory as ``GET /api/v1/memories/{id}`` shows it to
    the webhook's key now (``memory``: ``None`` if that key may not read it, or it is
    gone since; a memory.deleted: its id, if the key could read its scope), or ``None``:
    nothing to send."""
    data: dict[str, Any]
    if due.type == "memory.deleted":
        if not readable_scope:
            return None
        data = {"id": due.memory_id, "updatedAt": iso(due.created_at)}
    elif memory is None:
        return None
    else:
        data = {**memory_object(memory), "updatedAt": iso(memory.updated_at)}
    event = {
        "id": due.event_id,
        "type": due.type,
        "createdAt": iso(due.created_at),
        "data": {"memory": data},
    }
    return _encoder.encode(event)


async def render(
    conn: asyncpg.Connection, principal: Principal, dues: list[Due]
) -> list[bytes | None]:
    """The bodies of one key's claimed deliveries, in two queries whatever their number."""
    shown = await memories.get_readable_many(conn, principal, [d.memory_id for d in dues])
    scopes = await SCOPES_READABLE.fetchval(
        conn,
        scopes=[d.scope for d in dues if d.type == "memory.deleted"],
        is_service=principal.is_service,
        member=principal.member,
        rooms=principal.rooms,
    )
    readable = set(scopes or ())
    return [payload(d, shown.get(d.memory_id), d.scope in readable) for d in dues]


def headers(due: Due, body: bytes) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "Mneme-Event-Id": due.event_id,
        "Mneme-Event-Type": due.type,
        "Mneme-Signature": signature(due.secret, body, int(time.time())),
    }


class Dispatcher:
    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        allow_private: bool,
        observe: Callable[[str], None] | None = None,
    ) -> None:
        self.pool = pool
        self.allow_private = allow_private
        self.observe = observe or (lambda outcome: None)
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Dispatcher:
        self.http = outbound.session(allow_private=self.allow_private)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.http is not None:
            await self.http.close()

    async def deliver_due(self) -> int:
        """One pass: claim what is due, send it, record it; how many were claimed."""
        claimed = await webhooks.claim(self.pool, BATCH, IN_FLIGHT_S)
        if not claimed:
            return 0
        by_key: dict[tuple[str, str], list[Due]] = {}
        for due in claimed:
            by_key.setdefault((due.workspace_id, due.key_id), []).append(due)
        attempts = []
        async with self.pool.acquire() as conn:
            for who, dues in by_key.items():
                principal = await keys.principal_of_key(conn, *who)
                bodies: list[bytes | None] = [None] * len(dues)  # revoked, or reads nothing
                if principal is not None and "memory:read" in principal.scopes:
                    bodies = await render(conn, principal, dues)
                attempts += [(d, b, principal is None) for d, b in zip(dues, bodies, strict=True)]
        outcomes = await asyncio.gather(*(self._attempt(*a) for a in attempts))
        left = await webhooks.finish(self.pool, list(outcomes))
        for o in outcomes:
            state = left.get(o.due.key)
            if state is not None:  # None: retried by hand meanwhile, or its webhook deleted
                self.observe("retried" if state == "pending" else state)
        return len(claimed)

    async def _attempt(self, due: Due, body: bytes | None, revoked: bool) -> Outcome:
        if revoked:
            return Outcome(due, "failed", error="the webhook's key is revoked")
        if body is None:
            return Outcome(due, "skipped", error="the webhook's key may not read this memory")
        assert self.http is not None
        answer = await outbound.post(
            self.http, due.url, body, headers(due, body), allow_private=self.allow_private
        )
        if answer.error is None:
            return Outcome(due, "delivered", status=answer.status)
        return Outcome(
            due,
            "retry",
            status=answer.status,
            error=answer.error,
            delay_s=backoff_s(due.attempts + 1),
        )

    async def run(self, stop: asyncio.Event, on_error: Callable[[Exception], None]) -> None:
        """Until ``stop``: hold the lease (or wait for it) and send what is due."""
        renewed_at = -float("inf")
        holding = False
        try:
            while not stop.is_set():
                sent = 0
                try:
                    if time.monotonic() - renewed_at >= RENEW_S:
                        holding = await leases.take(self.pool, LEASE, self.holder, LEASE_S)
                        renewed_at = time.monotonic()
                    if holding:
                        sent = await self.deliver_due()
                except Exception as exc:
                    on_error(exc)
                if not sent:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), POLL_S if holding else RENEW_S)
        finally:
            if holding:
                with contextlib.suppress(Exception):
                    await leases.release(self.pool, LEASE, self.holder)


# How long a stopping process lets the pass under way finish (its sends time out at 10 s).
STOP_S = outbound.TIMEOUT_S + 2


async def lifetime(app: web.Application) -> AsyncIterator[None]:
    """The dispatcher of a serving process (``app.cleanup_ctx``)."""
    metrics = app[METRICS]
    dispatcher = Dispatcher(
        app[POOL],
        allow_private=app[SETTINGS].webhook_allow_private,
        observe=lambda outcome: metrics.webhook_deliveries.labels(outcome).inc(),
    )
    stop = asyncio.Event()

    def noted(exc: Exception) -> None:
        app[OUTAGE].note(exc, log, "webhook pass failed; will retry")

    async with dispatcher:
        task = asyncio.create_task(dispatcher.run(stop, noted), name="mneme-webhooks")
        yield
        stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), STOP_S)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
