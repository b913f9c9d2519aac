"""Multi-host database URLs, connected host by host.

``postgresql://u:p@n1:5432,n2:5432,n3:5432/mneme?target_session_attrs=read-write`` (a
Patroni cluster: docs/scaling.md): asyncpg tries the hosts in order under one connect
timeout, so a listed machine that is gone without refusing connections (its SYNs go
unanswered) spends the whole timeout when it comes first, and every new connection fails
while it is listed. ``connect`` gives each host its share of the timeout instead, and
tries first the host that answered last: after a failover the first new connection
finds the new primary, and the ones after it go there at once.

A URL with one host goes to asyncpg as it is.
"""

from __future__ import annotations

import time
import urllib.parse
from typing import Any

import asyncpg

# Failures that say "not this host, try the next": it is not there, not up yet, full, or
# not what target_session_attrs asks for. Anything else (a bad password, no such
# database) would be the same on every host and is raised at once.
NEXT_HOST = (
    OSError,
    TimeoutError,
    asyncpg.TargetServerAttributeNotMatched,
    asyncpg.CannotConnectNowError,
    asyncpg.PostgresConnectionError,
    asyncpg.TooManyConnectionsError,
)
DEFAULT_PORT = 5432


def hosts_of(url: str) -> list[tuple[str, int]]:
    """The hosts and ports of a URL's netloc (``h1:p1,[::1]:p2,h3``), in order."""
    spec = urllib.parse.urlsplit(url).netloc.rpartition("@")[2]
    hosts = []
    for part in filter(None, spec.split(",")):
        if part.startswith("["):  # [IPv6]:port
            host, _, rest = part[1:].partition("]")
            port = rest.removeprefix(":")
        else:
            host, _, port = part.partition(":")
        hosts.append((urllib.parse.unquote(host), int(port) if port else DEFAULT_PORT))
    return hosts


class Hosts:
    """One URL's hosts, and which of them answered last."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.hosts = hosts_of(url)
        self.last = 0  # index into hosts
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
        # One host at a time, "prefer-standby" would take the first host that answers:
        # a standby is looked for on every host first, then any host will do.
        prefer = query.get("target_session_attrs", [""])[-1] == "prefer-standby"
        self.passes: tuple[str | None, ...] = ("standby", "any") if prefer else (None,)

    # ``timeout`` is asyncpg's own parameter: its pool calls this in place of its connect.
    async def connect(self, dsn: str | None = None, *, timeout: float, **kwargs: Any) -> Any:  # noqa: ASYNC109
        """``asyncpg.connect`` to the first host that takes the connection, the last one
        that did first, all within ``timeout``. Raises the last host's failure if none
        takes it."""
        order = [self.last, *(i for i in range(len(self.hosts)) if i != self.last)]
        deadline = time.monotonic() + timeout
        failure: BaseException = TimeoutError(f"no host answered within {timeout} s")
        tries = [(attrs, i) for attrs in self.passes for i in order]
        for tried, (attrs, i) in enumerate(tries):
            # The time left, shared by the tries left: a host that refuses at once leaves
            # its share to the others.
            share = (deadline - time.monotonic()) / (len(tries) - tried)
            if share <= 0:
                break
            host, port = self.hosts[i]
            if attrs is not None:
                kwargs["target_session_attrs"] = attrs
            try:
                conn = await asyncpg.connect(
                    dsn or self.url, host=host, port=port, timeout=share, **kwargs
                )
            except NEXT_HOST as exc:
                failure = exc
                continue
            self.last = i
            return conn
        raise failure


_known: dict[str, Hosts] = {}


def hosts_for(url: str) -> Hosts | None:
    """The ``Hosts`` of a multi-host URL (one per URL in the process, so that every pool
    goes where the last connection went), ``None`` for a URL of one host."""
    if url not in _known:
        hosts = Hosts(url)
        if len(hosts.hosts) < 2:
            return None
        _known[url] = hosts
    return _known[url]


async def connect(url: str, *, timeout: float, **kwargs: Any) -> asyncpg.Connection:  # noqa: ASYNC109
    """``asyncpg.connect(url)``, host by host where ``url`` has several."""
    hosts = hosts_for(url)
    if hosts is None:
        conn: asyncpg.Connection = await asyncpg.connect(url, timeout=timeout, **kwargs)
        return conn
    multi: asyncpg.Connection = await hosts.connect(timeout=timeout, **kwargs)
    return multi
