"""Two of the three middlewares: request context (id, errors, metrics, access log) and
access control. The third, between them, is ``service.http.inputs.input_middleware`` (the
request's strings).

``context_middleware`` is outermost. Whatever happens inside — an ``ApiError``, one of
aiohttp's own HTTP exceptions (unmatched route 404, 405, body too large 413) or an
unexpected exception — leaves as the one error shape with a ``request-id`` header. A
500 never carries exception text; the log line does, under the same request id.

``access_middleware`` authenticates the key for routes that need one, applies the
workspace rate limit, then checks the route's scope. Requests refused with 401 are not
counted toward the rate limit, and carry ``WWW-Authenticate: Bearer``
(``service.http.errors.unauthorized``).
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiohttp import web

from service.http.errors import KIND_BY_STATUS, ApiError, api_error_of, render_error, unauthorized
from service.http.inputs import abandon_body
from service.http.keys import (
    METRICS,
    OUTAGE,
    PLANNED_ONCE_POOL,
    RECENT_KEYS,
    ROUTE_SPECS,
    SETTINGS,
)
from service.http.outage import RETRY_AFTER_S, is_rolled_back, is_unavailable
from service.http.public import PROTECTED_RESOURCE_PATH, public_base
from service.http.route import Handler
from service.ids import new_id
from service.problems import Problem, missing_scope
from service.queries import keys
from service.queries.keys import Principal
from service.queries.ratelimit import Decision

log = logging.getLogger("mneme.http")
access_log = logging.getLogger("mneme.access")

PRINCIPAL = web.RequestKey("principal", Principal)
REQUEST_ID = web.RequestKey("request_id", str)
PHASES = web.RequestKey("phases", list)


def phase(request: web.Request, name: str, seconds: float) -> None:
    """Add a named span to the response's ``Server-Timing`` header (e.g. ``embed``)."""
    request.setdefault(PHASES, []).append((name, seconds))


def _from_http_exception(request: web.Request, exc: web.HTTPException) -> ApiError:
    status = exc.status
    if status == 404:
        message = f"No route matches {request.method} {request.path}"
    elif status == 405:
        allowed = exc.headers.get("Allow", "")
        message = f"Method {request.method} is not allowed on {request.path}"
        if allowed:
            message += f"; allowed: {allowed}"
        return ApiError(405, message, kind="invalid_request_error", headers={"Allow": allowed})
    elif status == 413:
        max_mib = request.app[SETTINGS].max_body_bytes // (1024 * 1024)
        message = f"Request body is larger than {max_mib} MiB; split a large batch into several"
    else:
        message = exc.reason or "Request failed"
    return ApiError(status, message, kind=KIND_BY_STATUS.get(status, "invalid_request_error"))


def unexpected_error(request: web.Request, exc: Exception) -> ApiError:
    """An exception no handler (or MCP tool) turned into an ``ApiError``: the database
    being away (503, reported by ``service.http.outage``), or a bug (500: the traceback
    goes to the log under the request id, the client sees only the id)."""
    if is_rolled_back(exc):
        log.info(
            "rolled back to resolve a conflict with a concurrent request",
            extra={"request_id": request[REQUEST_ID], "sqlstate": getattr(exc, "sqlstate", None)},
        )
        return ApiError(
            503,
            "This request conflicted with a concurrent one and was rolled back (nothing was "
            "written); retry it",
            headers={"Retry-After": "1"},
        )
    if is_unavailable(exc):
        request.app[OUTAGE].failed(exc)
        return ApiError(
            503,
            "The database is unavailable; retry shortly",
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    request_id = request[REQUEST_ID]
    log.exception(
        "unhandled error",
        extra={"request_id": request_id, "method": request.method, "path": request.path},
    )
    return ApiError(500, f"Internal server error; quote request id {request_id} when reporting it")


@web.middleware
async def context_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    request_id = new_id("req")
    request[REQUEST_ID] = request_id
    started = time.perf_counter()
    response: web.StreamResponse
    try:
        response = await handler(request)
    except (ApiError, Problem) as exc:
        error = api_error_of(exc) if isinstance(exc, Problem) else exc
        spec = request.app[ROUTE_SPECS].get(request.match_info.route)
        if spec is not None and spec.plain_errors:
            error.extra = {}
        response = render_error(error)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = render_error(_from_http_exception(request, exc))
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        response = render_error(unexpected_error(request, exc))
    else:
        if request.get(PRINCIPAL) is not None and response.status < 500:
            request.app[OUTAGE].recovered()  # a key was checked: the database answered
    elapsed = time.perf_counter() - started
    response.headers["request-id"] = request_id
    # Time spent in the service (not the network): lets clients and benchmarks tell
    # server time from transport time.
    # Handlers may add their phases (search: embed, sql); "app" is always first.
    response.headers["Server-Timing"] = ", ".join(
        f"{name};dur={seconds * 1000:.3f}"
        for name, seconds in [("app", elapsed), *request.get(PHASES, [])]
    )

    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    metrics = request.app[METRICS]
    metrics.request_latency.labels(request.method, route).observe(elapsed)
    metrics.requests.labels(request.method, route, str(response.status)).inc()
    principal = request.get(PRINCIPAL)
    access_log.info(
        "%s %s %s",
        request.method,
        request.path,
        response.status,
        extra={
            "request_id": request_id,
            "method": request.method,
            "path": request.path,
            "status": response.status,
            "duration_ms": round(elapsed * 1000, 3),
            "workspace": principal.workspace_id if principal else None,
            "key": principal.key_id if principal else None,
        },
    )
    return response


def _ascii(secret: str) -> str:
    # Keys are ASCII; anything else cannot be one (and may not even encode as UTF-8).
    if not secret.isascii():
        raise unauthorized("Invalid or revoked API key")
    return secret


def presented_key(request: web.Request) -> str:
    """The key a request presents: ``Authorization: Bearer <key>``, else ``X-API-Key``.
    An Authorization header of another scheme (a proxy's Basic credentials) does not
    hide an X-API-Key beside it."""
    auth = request.headers.get("Authorization")
    scheme, _, token = (auth or "").strip().partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return _ascii(token.strip())
    key = request.headers.get("X-API-Key")
    if key is not None and key.strip():
        return _ascii(key.strip())
    if auth is not None:
        raise unauthorized("The Authorization header must be 'Bearer <api key>'")
    raise unauthorized("Missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'")


@web.middleware
async def access_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    spec = request.app[ROUTE_SPECS].get(request.match_info.route)
    if spec is None or spec.scope is None:
        return await handler(request)

    try:
        secret = presented_key(request)
        if keys.is_token(secret) and not spec.tokens:
            raise unauthorized(
                "An OAuth access token is accepted on /mcp only; send an API key here"
            )
    except ApiError as refused:
        raise _challenged(request, refused, spec.tokens, sent=False) from None
    limits = request.app[SETTINGS].rate_limits
    digest = keys.digest(secret)
    recent = request.app[RECENT_KEYS]
    prefetch = None
    if spec.prefetch is not None and digest in recent:
        prefetch = asyncio.ensure_future(spec.prefetch(request))
    started = time.perf_counter()
    try:
        found = await keys.authenticate_and_count(request.app[PLANNED_ONCE_POOL], secret, limits)
        phase(request, "auth", time.perf_counter() - started)
        if found is None:
            message = "Invalid, expired or revoked token" if keys.is_token(secret) else None
            raise _challenged(
                request, unauthorized(message or "Invalid or revoked API key"), spec.tokens
            )
        principal, decision = found
        if not decision.allowed or spec.scope not in principal.scopes:
            raise _refused(request, principal, decision, spec.scope)
        recent.add(digest)
        request[PRINCIPAL] = principal
        return await handler(request)
    finally:
        if prefetch is not None:
            # Answered without the prefetch's work (refused, or an error before the body
            # was wanted): stop it, and stop waiting for a body nobody reads, which aiohttp
            # then discards itself.
            prefetch.cancel()
            abandon_body(request)


def _challenged(request: web.Request, error: ApiError, tokens: bool, sent: bool = True) -> ApiError:
    """A 401 on a route that takes OAuth tokens (``/mcp``) says where to get one (RFC
    9728's ``resource_metadata``; the MCP authorization spec's discovery), and
    ``invalid_token`` when a credential was sent (RFC 6750 §3.1)."""
    if tokens and error.status == 401:
        metadata = f"{public_base(request)}{PROTECTED_RESOURCE_PATH}"
        challenge = f'Bearer realm="mneme", resource_metadata="{metadata}"'
        if sent:
            challenge += ', error="invalid_token"'
        error.headers["WWW-Authenticate"] = challenge
    return error


def _refused(
    request: web.Request, principal: Principal, decision: Decision, scope: str
) -> ApiError:
    """A key that checked out, over its workspace's rate limit or without the scope."""
    request[PRINCIPAL] = principal
    if not decision.allowed:
        limit = request.app[SETTINGS].rate_limits[principal.workspace_tier]
        request.app[METRICS].rate_limited.inc()
        return ApiError(
            429,
            f"Rate limit of {limit} requests per minute exceeded for this workspace "
            f"({principal.workspace_tier} plan); retry after {decision.retry_after} s",
            headers={"Retry-After": str(decision.retry_after)},
            retry_after=decision.retry_after,
        )
    return api_error_of(missing_scope(scope))


def principal_of(request: web.Request) -> Principal:
    return request[PRINCIPAL]
