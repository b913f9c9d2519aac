"""Requests to addresses a key chose, without reaching the service's own network.

A webhook's URL must be http(s) to a public address: loopback, private, link-local (the
cloud metadata service at 169.254.169.254 among them), shared, multicast and reserved
addresses are refused at creation and again at every delivery, on the addresses the
connection is actually made to (``GuardedResolver``: a name rebound to 127.0.0.1 after
the check is still refused). ``allow_private`` (``MNEME_WEBHOOK_ALLOW_PRIVATE``) lifts
it, for receivers on the same network and for the tests. Redirects are not followed, no
proxy from the environment is used, and at most ``READ_LIMIT`` bytes of an answer are read.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
import yarl
from aiohttp.abc import ResolveResult
from aiohttp.helpers import is_ip_address
from aiohttp.resolver import ThreadedResolver

TIMEOUT_S = 10.0
RESOLVE_S = 5.0  # a name asked for when a webhook is made
READ_LIMIT = 64 * 1024
# Of the answer's body, this much is kept with a failed attempt (the delivery log).
EXCERPT_CHARS = 200


class Refused(OSError):
    """An address a webhook may not reach."""


# IPv6 prefixes that carry an IPv4 address in their last 32 bits (NAT64, IPv4-compatible,
# IPv4-translated ``::ffff:0:a.b.c.d`` of RFC 2765/6145, which Python deems global):
# what they reach is that IPv4 address, checked as such.
IPV4_INSIDE = [
    ipaddress.ip_network(n) for n in ("64:ff9b::/96", "64:ff9b:1::/48", "::/96", "::ffff:0:0:0/96")
]


def public(address: str) -> bool:
    """Whether a webhook may reach ``address``: a global unicast address, an IPv6 form
    wrapping an IPv4 one (mapped, translated, NAT64, compatible, 6to4, Teredo) judged by
    that one."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone is not the address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.is_site_local:
            return False
        inner = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if inner is None and any(ip in net for net in IPV4_INSIDE):
            inner = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if inner is not None:
            return public(str(inner))
    return ip.is_global and not ip.is_multicast


def _literal(host: str) -> str | None:
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


def _host(url: str) -> str:
    """The host as aiohttp will connect to it (yarl's normal form: full-width digits, IDNA,
    a trailing dot)."""
    return yarl.URL(url).raw_host or ""


def url_problem(url: str, *, allow_private: bool) -> str | None:
    """Why ``url`` cannot be a webhook's (its form, or a literal address refused); names
    are resolved and checked by ``resolve_problem``."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        return f"not a URL: {exc}"
    if parts.scheme not in ("http", "https"):
        return "the URL must be http or https"
    if not parts.hostname:
        return "the URL has no host"
    if parts.username is not None or parts.password is not None:
        return "the URL may not carry credentials; the signature authenticates deliveries"
    if parts.fragment:
        return "the URL may not have a fragment"
    try:
        host = _host(url)
    except (ValueError, UnicodeError) as exc:
        return f"not a valid host name: {exc}"
    address = _literal(host)
    if address is None and is_ip_address(host):
        # aiohttp would connect to this as an address without resolving it (127.1,
        # 2130706433): only the plain forms are checked, so the others are refused.
        return f"{host} is not an address in its usual form"
    if address is not None and not allow_private and not public(address):
        return f"{address} is not a public address"
    return None


async def resolve_problem(url: str, *, allow_private: bool) -> str | None:
    """Why ``url``'s host cannot be reached by a webhook now (no such name, or a name of a
    refused address); ``None`` if it can."""
    host = _host(url)
    if _literal(host) is not None:
        return None
    try:
        resolving = GuardedResolver(allow_private=allow_private).resolve(host, 0, socket.AF_UNSPEC)
        await asyncio.wait_for(resolving, RESOLVE_S)
    except Refused as exc:
        return str(exc)
    except TimeoutError:
        return f"cannot resolve {host!r} within {RESOLVE_S:g} s"
    except OSError as exc:
        return f"cannot resolve {host!r}: {exc.strerror or exc}"
    except (ValueError, UnicodeError) as exc:  # a label IDNA refuses (empty, too long)
        return f"not a valid host name: {exc}"
    return None


class GuardedResolver(ThreadedResolver):
    """Resolves as usual, and refuses a name any of whose addresses is not public."""

    def __init__(self, *, allow_private: bool) -> None:
        super().__init__()
        self.allow_private = allow_private

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await super().resolve(host, port, family)
        if not self.allow_private:
            for r in found:
                if not public(r["host"]):
                    raise Refused(f"{host} resolves to {r['host']}, not a public address")
        return found


@dataclass(frozen=True)
class Answer:
    status: int | None  # None: no answer (refused, unreachable, timed out)
    error: str | None  # why it is not a 2xx, short


def session(*, allow_private: bool) -> aiohttp.ClientSession:
    """A session for deliveries: guarded resolution, no cached names (each delivery
    resolves again), no proxies or cookies."""
    connector = aiohttp.TCPConnector(
        resolver=GuardedResolver(allow_private=allow_private), use_dns_cache=False, limit=32
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=TIMEOUT_S),
        trust_env=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
    )


async def post(
    http: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    allow_private: bool,
) -> Answer:
    """POST ``body``; what came back (never raises for the endpoint's faults)."""
    problem = url_problem(url, allow_private=allow_private)
    if problem is not None:
        return Answer(None, problem)
    try:
        async with http.post(url, data=body, headers=headers, allow_redirects=False) as resp:
            excerpt = await resp.content.read(READ_LIMIT)
            if 200 <= resp.status < 300:
                return Answer(resp.status, None)
            text = excerpt[:EXCERPT_CHARS].decode("utf-8", "replace")
            return Answer(resp.status, f"HTTP {resp.status}: {text}".strip())
    except TimeoutError:
        return Answer(None, f"no answer within {TIMEOUT_S:g} s")
    except Refused as exc:
        return Answer(None, str(exc))
    except aiohttp.ClientConnectorError as exc:
        cause = exc.os_error
        if isinstance(cause, Refused):
            return Answer(None, str(cause))
        return Answer(None, f"cannot connect: {cause.strerror or cause}")
    except (aiohttp.ClientError, OSError, asyncio.IncompleteReadError) as exc:
        return Answer(None, f"{type(exc).__name__}: {exc}"[:EXCERPT_CHARS])
