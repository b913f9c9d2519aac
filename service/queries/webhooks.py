"""Webhooks, their events and deliveries (0025_webhooks.sql).

The events are written by triggers on ``memories`` in the writer's transaction (the
outbox); here are the endpoints' rows, the dispatcher's claim and outcomes, and the
delivery log.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from service.queries import Conn
from service.queries.named import NamedSQL

EVENTS = ("memory.created", "memory.updated", "memory.deleted", "memory.embedded")
# Finished deliveries (and events none of them still need) are kept this long for the log.
KEPT_DAYS = 7
# The backlog is counted up to this many (an index walk of at most that many entries).
BACKLOG_CAP = 10_000


@dataclass(frozen=True)
class Webhook:
    id: str
    key_id: str
    url: str
    events: list[str]
    store_id: str | None
    created_at: datetime


@dataclass(frozen=True)
class Delivery:
    event_id: str
    type: str
    state: str
    attempts: int
    last_status: int | None
    last_error: str | None
    next_attempt_at: datetime | None  # None once finished
    delivered_at: datetime | None
    created_at: datetime


@dataclass(frozen=True)
class Due:
    """A delivery the dispatcher has claimed: where to, signed with what, about what."""

    workspace_id: str
    webhook_id: str
    event_id: str
    key_id: str
    url: str
    secret: str
    type: str
    memory_id: str
    scope: str
    created_at: datetime
    attempts: int  # before this one

    @property
    def key(self) -> tuple[str, str, str]:
        return self.workspace_id, self.webhook_id, self.event_id


@dataclass(frozen=True)
class Outcome:
    due: Due
    state: str  # delivered | retry | failed | skipped
    status: int | None = None
    error: str | None = None
    delay_s: float = 0.0  # before the next attempt, for a retry


WEBHOOK_COLUMNS = "id, key_id, url, events, store_id, created_at"


def _webhook(row: asyncpg.Record) -> Webhook:
    return Webhook(**{name: row[name] for name in Webhook.__dataclass_fields__})


# Taken before counting, so two makers at once cannot both see room for one more (the
# workspace row's lock conflicts with no foreign-key check: those take KEY SHARE).
LOCK_WORKSPACE = NamedSQL("SELECT 1 FROM workspaces WHERE id = :workspace FOR NO KEY UPDATE")

# A statement of its own after the lock, so its snapshot holds every webhook made before.
INSERT = NamedSQL(f"""
INSERT INTO webhooks (workspace_id, id, key_id, url, events, store_id, secret)
SELECT :workspace, :id, :key, :url, :events, :store, :secret
WHERE (SELECT count(*) FROM webhooks WHERE workspace_id = :workspace) < :most
RETURNING {WEBHOOK_COLUMNS}
""")

SELECT_ALL = NamedSQL(f"""
SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE workspace_id = :workspace ORDER BY id
""")

SELECT_ONE = NamedSQL(f"""
SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE workspace_id = :workspace AND id = :id
""")

DELETE = NamedSQL("DELETE FROM webhooks WHERE workspace_id = :workspace AND id = :id RETURNING id")


async def create(
    conn: asyncpg.Connection,
    workspace_id: str,
    webhook_id: str,
    *,
    key_id: str,
    url: str,
    events: list[str],
    store_id: str | None,
    secret: str,
    most: int,
) -> Webhook | None:
    """``None`` when the workspace has ``most`` webhooks already."""
    async with conn.transaction():
        await LOCK_WORKSPACE.execute(conn, workspace=workspace_id)
        row = await INSERT.fetchrow(
            conn,
            workspace=workspace_id,
            id=webhook_id,
            key=key_id,
            url=url,
            events=events,
            store=store_id,
            secret=secret,
            most=most,
        )
    return None if row is None else _webhook(row)


async def list_all(conn: Conn, workspace_id: str) -> list[Webhook]:
    return [_webhook(r) for r in await SELECT_ALL.fetch(conn, workspace=workspace_id)]


async def get(conn: Conn, workspace_id: str, webhook_id: str) -> Webhook | None:
    row = await SELECT_ONE.fetchrow(conn, workspace=workspace_id, id=webhook_id)
    return None if row is None else _webhook(row)


async def delete(conn: Conn, workspace_id: str, webhook_id: str) -> bool:
    """Its deliveries go with it; ``False`` if the workspace has no such webhook."""
    return await DELETE.fetchval(conn, workspace=workspace_id, id=webhook_id) is not None


# --- the delivery log ---------------------------------------------------------------------

DELIVERY_COLUMNS = """
    d.event_id, e.type, d.state, d.attempts, d.last_status, d.last_error,
    CASE WHEN d.state = 'pending' THEN d.next_attempt_at END AS next_attempt_at,
    d.delivered_at, e.created_at"""

PAGE = NamedSQL(f"""
SELECT {DELIVERY_COLUMNS}
FROM webhook_deliveries d
JOIN webhook_events e ON e.workspace_id = d.workspace_id AND e.id = d.event_id
WHERE d.workspace_id = :workspace AND d.webhook_id = :webhook
  AND (:before::text IS NULL OR d.event_id < :before)
ORDER BY d.event_id DESC
LIMIT :limit
""")

# Whether an attempt of the delivery is in flight now (NULL: no such delivery), its row
# locked so that the dispatcher does not claim it in between.
SENDING = NamedSQL("""
SELECT coalesce(sending_until > now(), false) FROM webhook_deliveries
WHERE workspace_id = :workspace AND webhook_id = :webhook AND event_id = :event
FOR UPDATE
""")

RETRY = NamedSQL(f"""
WITH again AS (
    UPDATE webhook_deliveries
    SET state = 'pending', next_attempt_at = now(), retry_until = now() + interval '24 hours',
        finished_at = NULL
    WHERE workspace_id = :workspace AND webhook_id = :webhook AND event_id = :event
    RETURNING *
)
SELECT {DELIVERY_COLUMNS}
FROM again d
JOIN webhook_events e ON e.workspace_id = d.workspace_id AND e.id = d.event_id
""")


def _delivery(row: asyncpg.Record) -> Delivery:
    return Delivery(**{name: row[name] for name in Delivery.__dataclass_fields__})


async def deliveries(
    conn: Conn, workspace_id: str, webhook_id: str, before: str | None, limit: int
) -> list[Delivery]:
    """Newest event first, those before event id ``before`` (a page's cursor)."""
    rows = await PAGE.fetch(
        conn, workspace=workspace_id, webhook=webhook_id, before=before, limit=limit
    )
    return [_delivery(r) for r in rows]


class InFlight(Exception):
    """The delivery is being sent now: a retry would send it twice at once."""


async def retry(
    conn: asyncpg.Connection, workspace_id: str, webhook_id: str, event_id: str
) -> Delivery | None:
    """Send it again now, with 24 h of retries of its own, whatever it came to; raises
    ``InFlight`` while an attempt is being sent."""
    ids = {"workspace": workspace_id, "webhook": webhook_id, "event": event_id}
    async with conn.transaction():
        sending = await SENDING.fetchval(conn, **ids)
        if sending is None:
            return None
        if sending:
            raise InFlight(event_id)
        row = await RETRY.fetchrow(conn, **ids)
    assert row is not None  # its row is locked
    return _delivery(row)


# --- the dispatcher -----------------------------------------------------------------------

# Due deliveries, oldest due first, put off by :in_flight_s as they are claimed: were the
# dispatcher to die while sending them, they are due again after that (an at-least-once
# resend), and a new holder of its lease does not send them meanwhile.
CLAIM = NamedSQL("""
WITH due AS (
    SELECT workspace_id, webhook_id, event_id FROM webhook_deliveries
    WHERE state = 'pending' AND next_attempt_at <= now()
    ORDER BY next_attempt_at
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE webhook_deliveries d
    SET next_attempt_at = now() + make_interval(secs => :in_flight_s),
        sending_until = now() + make_interval(secs => :in_flight_s)
    FROM due
    WHERE d.workspace_id = due.workspace_id AND d.webhook_id = due.webhook_id
      AND d.event_id = due.event_id
    RETURNING d.workspace_id, d.webhook_id, d.event_id, d.attempts
)
SELECT c.workspace_id, c.webhook_id, c.event_id, c.attempts, w.key_id, w.url, w.secret,
       e.type, e.memory_id, e.scope, e.created_at
FROM claimed c
JOIN webhooks w ON w.workspace_id = c.workspace_id AND w.id = c.webhook_id
JOIN webhook_events e ON e.workspace_id = c.workspace_id AND e.id = c.event_id
ORDER BY e.id
""")

# A retry past its 24 h is failed instead.
FINISH = NamedSQL("""
UPDATE webhook_deliveries d
SET attempts = d.attempts + CASE WHEN o.state = 'skipped' THEN 0 ELSE 1 END,
    last_status = o.status,
    last_error = o.error,
    state = CASE WHEN o.state <> 'retry' THEN o.state
                 WHEN now() + make_interval(secs => o.delay_s) > d.retry_until THEN 'failed'
                 ELSE 'pending' END,
    next_attempt_at = now() + make_interval(secs => o.delay_s),
    sending_until = NULL,
    delivered_at = CASE WHEN o.state = 'delivered' THEN now() END,
    finished_at = CASE WHEN o.state <> 'retry'
                         OR now() + make_interval(secs => o.delay_s) > d.retry_until
                       THEN now() END
FROM unnest(:workspaces::text[], :webhooks::text[], :events::text[], :states::text[],
            :statuses::int[], :errors::text[], :delays::float8[])
     AS o(workspace_id, webhook_id, event_id, state, status, error, delay_s)
WHERE d.workspace_id = o.workspace_id AND d.webhook_id = o.webhook_id
  AND d.event_id = o.event_id AND d.state = 'pending'
RETURNING d.workspace_id, d.webhook_id, d.event_id, d.state
""")

# What the Overview and /metrics show: deliveries waiting (counted up to :cap) and those
# failed in the last day.
BACKLOG = NamedSQL("""
SELECT (SELECT count(*) FROM (
            SELECT 1 FROM webhook_deliveries d
            WHERE d.state = 'pending' AND (:workspace::text IS NULL OR d.workspace_id = :workspace)
            LIMIT :cap) s)::int AS pending,
       (SELECT count(*) FROM webhook_deliveries d
        WHERE d.state = 'failed' AND d.finished_at > now() - interval '1 day'
          AND (:workspace::text IS NULL OR d.workspace_id = :workspace))::int AS failed
""")

PRUNE = NamedSQL(f"""
WITH gone AS (
    DELETE FROM webhook_deliveries
    WHERE state <> 'pending' AND finished_at < now() - interval '{KEPT_DAYS} days'
)
DELETE FROM webhook_events e
WHERE e.created_at < now() - interval '{KEPT_DAYS} days'
  AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d
                  WHERE d.workspace_id = e.workspace_id AND d.event_id = e.id)
""")


def _due(row: asyncpg.Record) -> Due:
    return Due(**{name: row[name] for name in Due.__dataclass_fields__})


async def claim(conn: Conn, limit: int, in_flight_s: float) -> list[Due]:
    return [_due(r) for r in await CLAIM.fetch(conn, limit=limit, in_flight_s=in_flight_s)]


async def finish(conn: Conn, outcomes: list[Outcome]) -> dict[tuple[str, str, str], str]:
    """Record what the attempts came to; the state each delivery is left in (a retry
    past its 24 h: ``failed``), by ``Due.key``."""
    rows = await FINISH.fetch(
        conn,
        workspaces=[o.due.workspace_id for o in outcomes],
        webhooks=[o.due.webhook_id for o in outcomes],
        events=[o.due.event_id for o in outcomes],
        states=[o.state for o in outcomes],
        statuses=[o.status for o in outcomes],
        errors=[o.error for o in outcomes],
        delays=[o.delay_s for o in outcomes],
    )
    return {(r["workspace_id"], r["webhook_id"], r["event_id"]): r["state"] for r in rows}


async def backlog(conn: Conn, workspace_id: str | None, cap: int = BACKLOG_CAP) -> tuple[int, int]:
    """(deliveries waiting, up to ``cap``; deliveries failed in the last day), of one
    workspace or all."""
    row = await BACKLOG.fetchrow(conn, workspace=workspace_id, cap=cap)
    assert row is not None
    return int(row["pending"]), int(row["failed"])


async def prune(conn: Conn) -> None:
    await PRUNE.execute(conn)
