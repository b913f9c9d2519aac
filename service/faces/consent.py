"""The consent page: a person approves (or denies) an OAuth client with a Mneme key.

``GET /oauth/consent?request=<id>`` is where ``/oauth/authorize`` sends the browser: the
client's name and where it will send the person back to (the scheme and host the browser
will go to, as ``queries.oauth.redirect_target`` reads the redirect URI), read or
read + write (write only when the client asked for it), the default store, and a field
for the person's Mneme key, the proof of who they are (a personal key acts as its
member). The key travels in the form's body, never a URL, and is not logged.

``POST /oauth/consent`` answers: approve makes the grant and a single-use code and sends
the browser to the client's redirect URI with it; deny sends it there with
``error=access_denied``; both name the issuer (RFC 9207's ``iss``). CSRF: the page sets
a fresh random token in an ``HttpOnly``, ``SameSite=Strict`` cookie and in the form, and
stores its hash with the request; the answer must carry both, equal, and matching. The
page cannot be framed (``frame-ancestors 'none'``) and loads nothing
(``default-src 'none'``).
"""

from __future__ import annotations

import hmac
from html import escape
from typing import Any
from urllib.parse import parse_qs, urlsplit

from aiohttp import web
from mcp.server.auth.provider import construct_redirect_uri

from service.app_keys import POOL
from service.decoding import string_problem
from service.http.inputs import body_of
from service.http.public import public_base
from service.oauth.provider import CONSENT_PATH, SCOPES
from service.queries import keys, memories, oauth

COOKIE = "mneme_consent"
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}
NOT_OURS = "This is not the form the consent page sends. Start again from the app that sent you."
GONE = (
    "This sign-in request has expired, was already answered, or was not opened here. "
    "Start again from the app that sent you."
)


def _page(title: str, body: str, status: int = 200) -> web.Response:
    html = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)} · Mneme</title>
<style>
body {{ font: 16px/1.5 system-ui, sans-serif; max-width: 32rem; margin: 3rem auto;
       padding: 0 1rem; color: #1f2328; }}
h1 {{ font-size: 1.4rem; }} .host {{ font-family: monospace; }}
fieldset {{ border: 1px solid #d0d7de; border-radius: 6px; margin: 1rem 0; }}
input[type=password], input[type=text] {{ width: 100%; padding: .4rem; box-sizing: border-box; }}
.error {{ color: #b42318; }} button {{ padding: .5rem 1.2rem; margin-right: .5rem; }}
</style></head><body>{body}</body></html>"""
    return web.Response(
        text=html, status=status, content_type="text/html", charset="utf-8", headers=HEADERS
    )


def _requested(pending: oauth.Pending, metadata: dict[str, Any]) -> list[str]:
    """What the page offers: read, and write when the client asked for it (in the request,
    else when registering). Every grant reads (0021's constraint): a client that asked only
    to write is offered what the page says, read and write, or read only."""
    named = pending.params.get("scopes") or (metadata.get("scope") or "").split()
    return ["memory:read"] + (["memory:write"] if "memory:write" in named else [])


def _form(
    request: web.Request,
    pending: oauth.Pending,
    metadata: dict[str, Any],
    csrf: str,
    error: str | None = None,
    store: str = "default",
) -> str:
    name = metadata.get("client_name") or pending.client_id
    host = oauth.redirect_target(pending.params["redirect_uri"])
    writes = "memory:write" in _requested(pending, metadata)
    write_choice = (
        '<label><input type="radio" name="access" value="write" checked> '
        "Read and write: recall memories and remember new ones</label><br>"
        if writes
        else ""
    )
    read_checked = "" if writes else " checked"
    problem = f'<p class="error" role="alert">{escape(error)}</p>' if error else ""
    return f"""<h1>Connect {escape(name)} to Mneme?</h1>
<p><strong>{escape(name)}</strong> asks to use your memories. After you answer, you go
back to <span class="host">{escape(host)}</span>.</p>{problem}
<form method="post" action="{escape(public_base(request) + CONSENT_PATH)}">
<input type="hidden" name="request" value="{escape(pending.id)}">
<input type="hidden" name="csrf" value="{escape(csrf)}">
<fieldset><legend>What it may do</legend>
{write_choice}<label><input type="radio" name="access" value="read"{read_checked}>
Read only: recall and browse memories</label></fieldset>
<p><label for="store">Default store</label><br>
<input type="text" id="store" name="store" value="{escape(store)}" required></p>
<p><label for="key">Your Mneme key (it proves who you are; the app never sees it)</label><br>
<input type="password" id="key" name="key" autocomplete="off" required></p>
<p><button type="submit" name="decision" value="approve">Allow</button>
<button type="submit" name="decision" value="deny" formnovalidate>Deny</button></p>
</form>"""


async def _pending_and_client(
    request: web.Request, request_id: str
) -> tuple[oauth.Pending, dict[str, Any]] | None:
    pool = request.app[POOL]
    pending = await oauth.pending(pool, request_id)
    if pending is None:
        return None
    client = await oauth.client(pool, pending.client_id)
    return None if client is None else (pending, client[0])


async def show(request: web.Request) -> web.Response:
    """GET: the form, with a fresh CSRF token in it and in a cookie."""
    found = await _pending_and_client(request, request.query.get("request", ""))
    csrf = None if found is None else await oauth.new_csrf(request.app[POOL], found[0].id)
    if found is None or csrf is None:
        return _page("Request expired", f"<h1>Request expired</h1><p>{GONE}</p>", 400)
    response = _page("Connect an app", _form(request, *found, csrf))
    base = public_base(request)
    response.set_cookie(
        COOKIE,
        csrf,
        max_age=oauth.REQUEST_TTL_S,
        path=urlsplit(base).path + CONSENT_PATH,
        httponly=True,
        samesite="Strict",
        secure=base.startswith("https://"),
    )
    return response


def _field(form: dict[str, list[str]], name: str) -> str:
    """A form field's value ("" when absent, or when it is text PostgreSQL cannot hold:
    nothing a real form sends)."""
    value = (form.get(name) or [""])[0].strip()
    return "" if string_problem(value) is not None else value


async def answer(request: web.Request) -> web.Response:
    """POST: approve or deny; either way the browser goes back to the client."""
    try:
        form = parse_qs((await body_of(request)).decode("utf-8", "replace"), max_num_fields=20)
    except ValueError:  # over max_num_fields: not a form this page sent
        return _page("Not this page's form", f"<h1>Too many fields</h1><p>{NOT_OURS}</p>", 400)
    request_id, csrf = _field(form, "request"), _field(form, "csrf")
    cookie = request.cookies.get(COOKIE, "")
    pool = request.app[POOL]
    fresh = bool(csrf) and hmac.compare_digest(cookie.encode(), csrf.encode())
    found = await _pending_and_client(request, request_id) if fresh else None
    if found is None or not await oauth.csrf_matches(pool, request_id, csrf):
        return _page("Request expired", f"<h1>Request expired</h1><p>{GONE}</p>", 403)
    pending, metadata = found
    if _field(form, "decision") != "approve":
        return await _send_back(request, pending.id, csrf, error="access_denied")
    store = _field(form, "store") or "default"
    approval, problem = await _approval(pool, form, pending, metadata, store)
    if approval is None:
        page = _form(request, pending, metadata, csrf, error=problem, store=store)
        return _page("Connect an app", page, 400)
    return await _send_back(request, pending.id, csrf, approval=approval)


async def _approval(
    pool: Any,
    form: dict[str, list[str]],
    pending: oauth.Pending,
    metadata: dict[str, Any],
    store: str,
) -> tuple[oauth.Approval | None, str | None]:
    """What the person approved, or why it cannot be granted."""
    secret = _field(form, "key")
    principal = None
    if secret.isascii() and not keys.is_token(secret):
        principal = await keys.authenticate(pool, secret)
    if principal is None:
        return None, "That key is not a valid Mneme key (or it was revoked)."
    chosen = SCOPES if _field(form, "access") == "write" else ["memory:read"]
    wanted = [s for s in chosen if s in _requested(pending, metadata)]
    lacking = [s for s in wanted if s not in principal.scopes]
    if lacking:
        return None, f"That key lacks {' and '.join(lacking)}: choose less, or use another key."
    found = await memories.resolve_store(pool, principal.workspace_id, store)
    if found is None:
        return None, f"There is no store {store!r} in this key's workspace."
    return oauth.Approval(principal.workspace_id, principal.key_id, wanted, found.name), None


async def _send_back(
    request: web.Request,
    request_id: str,
    csrf: str,
    *,
    error: str | None = None,
    approval: oauth.Approval | None = None,
) -> web.Response:
    """Answer the request once and send the browser to the client's redirect URI."""
    pool = request.app[POOL]
    async with pool.acquire() as conn, conn.transaction():
        pending = await oauth.take_request(conn, request_id, csrf)
        if pending is None:  # answered meanwhile (a double submit)
            return _page("Request expired", f"<h1>Request expired</h1><p>{GONE}</p>", 403)
        # RFC 9207: the issuer, so a client talking to several servers knows whose answer
        # this is (the SDK's own error redirects get it in service.faces.oauth).
        params: dict[str, str | None] = {
            "state": pending.params.get("state"),
            "iss": public_base(request),
        }
        if approval is not None:
            params["code"] = await oauth.grant_with_code(conn, pending, approval)
        else:
            params["error"] = error
    location = construct_redirect_uri(pending.params["redirect_uri"], **params)
    raise web.HTTPSeeOther(location, headers={"Cache-Control": "no-store"})
