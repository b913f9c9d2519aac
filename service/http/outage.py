"""Database outages: recognised, answered 503 with Retry-After, reported once per interval.

With PostgreSQL down (stopped, restarting, crashed, refusing connections), every request
that needs it fails the same way for a while. Each such failure is answered
``503 api_error`` with ``Retry-After`` (``service.http.middleware``), and the log gets one
warning when the outage starts, one every ``REPORT_EVERY_S`` while it lasts (with how
many failures it has caused), and one when a request succeeds again: not a traceback per
request. The pool reconnects by itself, so the service recovers without a restart.

After a failover (docs/scaling.md, high availability) a pooled connection may still be
open to the old primary, now a standby: its writes fail read-only (25006). The first such
failure expires every connection of the primary's pools (``follow``), so the next
acquire reconnects through the URL's ``target_session_attrs=read-write`` to the new one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

import asyncpg

log = logging.getLogger("mneme.db")

RETRY_AFTER_S = 2
REPORT_EVERY_S = 30.0
# SQLSTATE classes that mean "the database is not there for you right now":
# 08 connection exception, 53 insufficient resources (too many connections),
# 57 operator intervention (shutting down, starting up, crashed) but not 57014 (a query
# cancelled: a timeout, a statement's fault); and 25006, a read-only transaction (the
# primary failed over and this connection reached a standby).
UNAVAILABLE_CLASSES = ("08", "53", "57")
UNAVAILABLE_EXCEPT = ("57014",)
READ_ONLY_STATE = "25006"
UNAVAILABLE_STATES = (READ_ONLY_STATE,)
_ASYNCPG = os.path.dirname(asyncpg.__file__) + os.sep


# A transaction PostgreSQL rolled back to break a deadlock or a serialization conflict
# with a concurrent one: nothing of it was written, so the client may simply retry.
ROLLED_BACK_STATES = ("40P01", "40001")


def is_rolled_back(exc: BaseException) -> bool:
    return isinstance(exc, asyncpg.PostgresError) and exc.sqlstate in ROLLED_BACK_STATES


def is_unavailable(exc: BaseException, *, database_work: bool = False) -> bool:
    """Whether ``exc`` says the database cannot be reached, rather than that a query was
    wrong: such a failure is the database's state, not the request's fault.
    ``database_work``: ``exc`` came from work that does nothing but talk to the database
    (the worker, the janitor, a probe), so any OSError or timeout is the database's."""
    if isinstance(exc, asyncpg.PostgresError):
        state = exc.sqlstate or ""
        if state in UNAVAILABLE_STATES:
            return True
        return state[:2] in UNAVAILABLE_CLASSES and state not in UNAVAILABLE_EXCEPT
    if isinstance(exc, asyncpg.InterfaceError):
        # "connection is closed", "pool is closing": a connection lost under the request.
        return "clos" in str(exc)
    if isinstance(exc, asyncpg.InternalClientError):
        # The server ended an idle pooled connection (shutting down) just as a query was
        # sent on it: asyncpg's protocol state then refuses the query ("cannot switch to
        # state 12; another operation is in progress", MagicStack/asyncpg#1069).
        # SQLAlchemy's asyncpg dialect treats it as a disconnect for the same reason.
        return True
    # Refused, reset, no socket file, or no answer within the connect/command timeout:
    # raised while asyncpg was connecting or talking to the server (an OSError of the
    # service's own, or of a client that went away, is not the database's).
    return isinstance(exc, OSError | TimeoutError) and (database_work or _raised_in_asyncpg(exc))


def _raised_in_asyncpg(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith(_ASYNCPG):
            return True
        tb = tb.tb_next
    return False


class Outage:
    """The state of the database as this process last saw it, for the log."""

    def __init__(self, report_every_s: float = REPORT_EVERY_S) -> None:
        self.report_every_s = report_every_s
        self.since: float | None = None  # monotonic time of the first failure
        self.failures = 0
        self._reported_at = 0.0
        self._primary_pools: list[asyncpg.Pool] = []
        self._expiring: set[asyncio.Task[None]] = set()

    def follow(self, pool: asyncpg.Pool) -> None:
        """Drop ``pool``'s connections when one of them turns out to be on a standby."""
        self._primary_pools.append(pool)

    def failed(self, exc: BaseException) -> None:
        if isinstance(exc, asyncpg.PostgresError) and exc.sqlstate == READ_ONLY_STATE:
            for pool in self._primary_pools:
                # A coroutine that only bumps the pool's generation; done by the next tick.
                task = asyncio.get_running_loop().create_task(pool.expire_connections())
                self._expiring.add(task)
                task.add_done_callback(self._expiring.discard)
        now = time.monotonic()
        self.failures += 1
        if self.since is None:
            self.since = now
        elif now - self._reported_at < self.report_every_s:
            return
        self._reported_at = now
        log.warning(
            "database unavailable; answering 503 until it is back",
            extra={
                "error": f"{type(exc).__name__}: {exc}"[:300],
                "failures": self.failures,
                "for_s": round(now - self.since, 1),
            },
        )

    def note(self, exc: BaseException, logger: logging.Logger, what: str) -> None:
        """A failure of database work in the background (or of a probe): an outage is
        reported as above, anything else is an error with its traceback."""
        if is_unavailable(exc, database_work=True):
            self.failed(exc)
        else:
            logger.error(what, exc_info=exc)

    def recovered(self) -> None:
        if self.since is None:
            return
        log.warning(
            "database available again",
            extra={
                "failures": self.failures,
                "for_s": round(time.monotonic() - self.since, 1),
            },
        )
        self.since, self.failures = None, 0
