"""The URL people reach the service at: ``MNEME_PUBLIC_URL`` (behind a TLS proxy), else
the request's own scheme and host. OAuth names its issuer, endpoints and the ``/mcp``
resource from it."""

from __future__ import annotations

import ipaddress

from aiohttp import web

from service.http.keys import SETTINGS
from service.settings import Settings

# RFC 9728's document for the service as a whole; the same document is also served at
# this path plus ``/mcp`` (the resource's own path, where RFC 9728 §3.1 puts it).
PROTECTED_RESOURCE_PATH = "/.well-known/oauth-protected-resource"
MCP_PATH = "/mcp"


def public_base(request: web.Request) -> str:
    """``https://host[:port][/prefix]``, no trailing slash."""
    configured = request.app[SETTINGS].public_url
    if configured is not None:
        return configured
    return f"{request.scheme}://{request.host}"


def mcp_resource(request: web.Request) -> str:
    """The canonical URI of this MCP server (RFC 8707's resource, what tokens are for)."""
    return public_base(request) + MCP_PATH


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a URL (a path prefix dropped)."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def is_loopback(host: str) -> bool:
    """Whether a host name or address (IPv6 in brackets or not) is this machine's."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def issuer_warning(settings: Settings) -> str | None:
    """What ``mneme serve`` warns of at start, if anything: without ``MNEME_PUBLIC_URL``
    the OAuth issuer and endpoints are named from each request's Host header, which a
    client from off this machine chooses."""
    if settings.public_url is not None or is_loopback(settings.host):
        return None
    return (
        f"MNEME_PUBLIC_URL is unset and Mneme listens on {settings.host}: the OAuth issuer "
        "and endpoints are named from each request's Host header. Set MNEME_PUBLIC_URL to "
        "the URL people reach Mneme at."
    )
