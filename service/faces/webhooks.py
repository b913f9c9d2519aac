"""Webhooks face (``admin`` scope): endpoints of the workspace, and their delivery logs.

The deliveries themselves are the dispatcher's (``service.webhooks.dispatcher``).
"""

from __future__ import annotations

import secrets
from typing import Any

import msgspec
from aiohttp import web

from service.app_keys import POOL, SETTINGS
from service.faces.browse import parse_limit
from service.http.inputs import read_body
from service.http.json import json_response
from service.http.middleware import principal_of
from service.ids import id_pattern, new_id
from service.problems import Conflict, Invalid, NotFound
from service.queries import memories, webhooks
from service.times import iso, iso_or_none
from service.webhooks import outbound

MAX_PER_WORKSPACE = 25
MAX_URL_CHARS = 2048
WEBHOOK_ID = id_pattern("whk")
EVENT_ID = id_pattern("evt")


class WebhookIn(msgspec.Struct, forbid_unknown_fields=True):
    url: str
    events: list[str]
    store: str | None = None


def webhook_object(w: webhooks.Webhook) -> dict[str, Any]:
    return {
        "id": w.id,
        "url": w.url,
        "events": w.events,
        "store": w.store_id,
        "createdAt": iso(w.created_at),
    }


def delivery_object(d: webhooks.Delivery) -> dict[str, Any]:
    return {
        "event": d.event_id,
        "type": d.type,
        "state": d.state,
        "attempts": d.attempts,
        "lastStatus": d.last_status,
        "lastError": d.last_error,
        "nextAttemptAt": iso_or_none(d.next_attempt_at),
        "deliveredAt": iso_or_none(d.delivered_at),
        "createdAt": iso(d.created_at),
    }


def check_events(events: list[str]) -> list[str]:
    unknown = [e for e in events if e not in webhooks.EVENTS]
    if unknown or not events:
        raise Invalid(
            f"Unknown event(s): {', '.join(unknown)}" if unknown else "events may not be empty",
            valid=list(webhooks.EVENTS),
            param="events",
        )
    return [e for e in webhooks.EVENTS if e in events]  # canonical order, no repeats


async def check_url(request: web.Request, url: str) -> str:
    allow_private = request.app[SETTINGS].webhook_allow_private
    if len(url) > MAX_URL_CHARS:
        problem: str | None = f"the URL is longer than {MAX_URL_CHARS} characters"
    else:
        problem = outbound.url_problem(url, allow_private=allow_private)
    problem = problem or await outbound.resolve_problem(url, allow_private=allow_private)
    if problem is not None:
        raise Invalid(f"Webhook URL refused: {problem}", param="url")
    return url


async def create_webhook(request: web.Request) -> web.Response:
    body = await read_body(request, WebhookIn)
    principal = principal_of(request)
    if "memory:read" not in principal.scopes:
        raise Invalid(
            "A webhook shows memories as its key reads them, and this key reads none: "
            "make it with a key that has the 'memory:read' scope"
        )
    events = check_events(body.events)
    url = await check_url(request, body.url)
    pool = request.app[POOL]
    store_id = None
    if body.store is not None:
        store = await memories.resolve_store(pool, principal.workspace_id, body.store)
        if store is None:
            raise Invalid(f"No store {body.store!r} in this workspace", param="store")
        store_id = store.id
    secret = "whsec_" + secrets.token_urlsafe(32)
    async with pool.acquire() as conn:
        made = await webhooks.create(
            conn,
            principal.workspace_id,
            new_id("whk"),
            key_id=principal.key_id,
            url=url,
            events=events,
            store_id=store_id,
            secret=secret,
            most=MAX_PER_WORKSPACE,
        )
    if made is None:
        raise Conflict(f"A workspace has at most {MAX_PER_WORKSPACE} webhooks")
    return json_response({**webhook_object(made), "secret": secret}, status=201)


async def list_webhooks(request: web.Request) -> web.Response:
    """The workspace's webhooks, and in ``meta`` its deliveries waiting (counted up to
    ``webhooks.BACKLOG_CAP``) and given up in the last 24 hours (the page's Overview)."""
    workspace_id = principal_of(request).workspace_id
    found = await webhooks.list_all(request.app[POOL], workspace_id)
    pending, failed = await webhooks.backlog(request.app[POOL], workspace_id)
    return json_response(
        {
            "data": [webhook_object(w) for w in found],
            "meta": {"pending": pending, "failedLastDay": failed},
        }
    )


async def _webhook(request: web.Request) -> webhooks.Webhook:
    webhook_id = request.match_info["webhook_id"]
    found = None
    if WEBHOOK_ID.fullmatch(webhook_id):
        found = await webhooks.get(
            request.app[POOL], principal_of(request).workspace_id, webhook_id
        )
    if found is None:
        raise NotFound(f"Webhook {webhook_id!r} not found")
    return found


async def get_webhook(request: web.Request) -> web.Response:
    return json_response(webhook_object(await _webhook(request)))


async def delete_webhook(request: web.Request) -> web.Response:
    webhook = await _webhook(request)
    await webhooks.delete(request.app[POOL], principal_of(request).workspace_id, webhook.id)
    return web.Response(status=204)


async def list_deliveries(request: web.Request) -> web.Response:
    """Newest event first, ``limit`` (default 25, at most 100) a page, after ``cursor``."""
    webhook = await _webhook(request)
    limit, _ = parse_limit(request.query.get("limit") or None)
    cursor = request.query.get("cursor") or None
    if cursor is not None and not EVENT_ID.fullmatch(cursor):
        raise Invalid("cursor is not one this endpoint gave", param="cursor")
    found = await webhooks.deliveries(
        request.app[POOL], principal_of(request).workspace_id, webhook.id, cursor, limit + 1
    )
    page = found[:limit]
    has_more = len(found) > limit
    return json_response(
        {
            "data": [delivery_object(d) for d in page],
            "cursor": page[-1].event_id if has_more else None,
            "hasMore": has_more,
        }
    )


async def retry_delivery(request: web.Request) -> web.Response:
    webhook = await _webhook(request)
    event_id = request.match_info["event_id"]
    found = None
    if EVENT_ID.fullmatch(event_id):
        async with request.app[POOL].acquire() as conn:
            try:
                found = await webhooks.retry(
                    conn, principal_of(request).workspace_id, webhook.id, event_id
                )
            except webhooks.InFlight:
                raise Conflict(
                    f"Event {event_id!r} is being sent to this webhook now: "
                    "retry it once this attempt is done (its log shows it)"
                ) from None
    if found is None:
        raise NotFound(f"Webhook {webhook.id!r} has no delivery of event {event_id!r}")
    return json_response(delivery_object(found), status=202)
