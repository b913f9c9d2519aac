"""What a client may register (RFC 7591), when anyone may register without a key.

Bounded, so that registration cannot grow the database: a body of at most 64 KiB (held
before it is parsed, by ``service.faces.oauth``), a ``client_name`` of at most 200
characters, at most 10 redirect URIs of at most 2,000 bytes each, and in the rest of the
metadata the SDK stores every string at most 2,000 characters and every list at most 10
items.

And a redirect URI must send the browser where it appears to, since the consent page
tells the person where they go back to: https (or http to a loopback host), and nothing
that urllib, which the page reads it with, and a browser, which follows it, could take for
different hosts: no ``@`` anywhere (userinfo, or one a reader mistakes for it), no
backslash (a browser reads it as ``/``), no whitespace, control or invisible characters,
no fragment (an empty ``#`` included), no percent-encoding in the host, and urllib's host
the one a browser goes to (the WHATWG URL parser, which pydantic's URLs follow; case and
IDNA are normalised alike, ``0x7f.1`` is not ``127.0.0.1``).

Refusals are RFC 7591's errors, as the SDK's handler answers them (400).
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any
from urllib.parse import urlsplit

from mcp.server.auth.provider import RegistrationError
from mcp.shared.auth import OAuthClientMetadata
from pydantic import AnyUrl, ValidationError

from service.http.public import is_loopback

MAX_BODY_BYTES = 64 * 1024
MAX_NAME_CHARS = 200
MAX_REDIRECT_URIS = 10
MAX_URI_BYTES = 2000
MAX_STRING_CHARS = 2000
MAX_LIST_ITEMS = 10
# The fields the SDK keeps (anything else in a body is dropped, so need not be judged).
STORED = frozenset(OAuthClientMetadata.model_fields) - {"redirect_uris"}


def check_metadata(body: bytes) -> None:
    """Refuse metadata over the bounds, or a redirect URI that is not plainly where it
    sends the browser. A body that is not a JSON object is left to the SDK's handler,
    which refuses it in its own words."""
    try:
        metadata = json.loads(body)
    except (ValueError, RecursionError):
        return
    if not isinstance(metadata, dict):
        return
    if (problem := _bounds_problem(metadata)) is not None:
        raise RegistrationError("invalid_client_metadata", problem)
    uris = metadata.get("redirect_uris")
    for uri in uris if isinstance(uris, list) else []:
        if isinstance(uri, str):
            check_redirect_uri(uri)


def _bounds_problem(metadata: dict[str, Any]) -> str | None:
    name = metadata.get("client_name")
    if isinstance(name, str) and len(name) > MAX_NAME_CHARS:
        return f"client_name is longer than {MAX_NAME_CHARS} characters"
    uris = metadata.get("redirect_uris")
    if isinstance(uris, list) and len(uris) > MAX_REDIRECT_URIS:
        return f"a client may register at most {MAX_REDIRECT_URIS} redirect_uris"
    pending = [(k, v) for k, v in metadata.items() if k in STORED]
    while pending:  # not recursive: ``jwks`` may nest as deep as the parser allowed
        path, value = pending.pop()
        if isinstance(value, str) and len(value) > MAX_STRING_CHARS:
            return f"{path} is longer than {MAX_STRING_CHARS} characters"
        if isinstance(value, list):
            if len(value) > MAX_LIST_ITEMS:
                return f"{path} has more than {MAX_LIST_ITEMS} items"
            pending += [(f"{path}[{i}]", v) for i, v in enumerate(value)]
        elif isinstance(value, dict):
            pending += [(f"{path}.{k}", v) for k, v in value.items()]
    return None


def check_redirect_uri(uri: str) -> None:
    """https anywhere, http only back to this machine (a native app's loopback listener),
    and the host plain to see (the module's docstring); nothing else."""
    if (problem := _redirect_problem(uri)) is not None:
        shown = uri if len(uri) <= 200 else uri[:200] + "…"
        raise RegistrationError("invalid_redirect_uri", f"redirect URI {shown!r} {problem}")


def _redirect_problem(uri: str) -> str | None:
    if len(uri.encode("utf-8", "surrogatepass")) > MAX_URI_BYTES:
        return f"is longer than {MAX_URI_BYTES} bytes"
    for c in uri:
        if c == "#":
            return "has a fragment (RFC 6749 §3.1.2)"
        if c == "@":
            return "holds '@' (userinfo, or what a reader takes for it)"
        if c == "\\" or unicodedata.category(c)[0] in "CZ":
            return f"holds {c!r}, which browsers and parsers read differently"
    try:
        parts = urlsplit(uri)
    except ValueError:  # "https://[claude.ai/cb": an IPv6 bracket left open
        return "is not a URL"
    host = parts.hostname or ""
    if not host:
        return "names no host"
    if not (parts.scheme == "https" or (parts.scheme == "http" and is_loopback(host))):
        return "is neither https nor http on a loopback host"
    try:
        port = parts.port
    except ValueError:
        return "has a port that is not a number from 0 to 65535"
    if "%" in parts.netloc or parts.netloc.lower() != _authority(host, port):
        return "has a host that is not plain (percent-encoded, or not just host and port)"
    browser = _browser_host(uri)
    if browser is None or browser != _ascii(host):
        return "has a host a browser reads otherwise"
    return None


def _authority(host: str, port: int | None) -> str:
    bracketed = f"[{host}]" if ":" in host else host
    return bracketed if port is None else f"{bracketed}:{port}"


def _ascii(host: str) -> str | None:
    """The host as a browser's request names it: IDNA for a Unicode name."""
    if ":" in host:
        return f"[{host}]"
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return None


def _browser_host(uri: str) -> str | None:
    """The host a browser goes to for ``uri`` (the WHATWG URL parser's), if any."""
    try:
        return AnyUrl(uri).host
    except ValidationError:
        return None
