"""OAuth's rows: registered clients, requests waiting on the consent page, grants, codes
and tokens (sql/migrations/0021_oauth.sql).

Every secret is stored as its SHA-256 (``keys.digest``) and looked up by it. Spending a
code or a refresh token is one ``UPDATE … WHERE used_at IS NULL``: of two concurrent
exchanges exactly one wins, and the loser learns the token was spent, which revokes the
grant (its whole family of tokens) as a replay.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from service.ids import new_id
from service.queries import Conn
from service.queries.keys import TOKEN_PREFIX, digest
from service.queries.named import NamedSQL

ACCESS_PREFIX = TOKEN_PREFIX
REFRESH_PREFIX = "mneme_rt_"
CODE_PREFIX = "mneme_ac_"
CODE_TTL_S = 60
REQUEST_TTL_S = 600  # a person has ten minutes to answer the consent page
REFRESH_TTL_S = 30 * 24 * 3600  # a refresh token unused for 30 days is dead
DEFAULT_PORTS = {"http": 80, "https": 443}


def new_secret(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


# --- clients ------------------------------------------------------------------------------

INSERT_CLIENT = NamedSQL("""
INSERT INTO oauth_clients (id, metadata, secret_sha256)
VALUES (:id, :metadata::jsonb, :secret_sha256)
""")

SELECT_CLIENT = NamedSQL("SELECT metadata, secret_sha256 FROM oauth_clients WHERE id = :id")


async def insert_client(
    conn: Conn, client_id: str, metadata: dict[str, Any], secret: str | None
) -> None:
    await INSERT_CLIENT.execute(
        conn,
        id=client_id,
        metadata=json.dumps(metadata),
        secret_sha256=None if secret is None else digest(secret),
    )


async def client(conn: Conn, client_id: str) -> tuple[dict[str, Any], bytes | None] | None:
    """A registered client's metadata and its secret's hash (``None``: a public one)."""
    row = await SELECT_CLIENT.fetchrow(conn, id=client_id)
    if row is None:
        return None
    secret = row["secret_sha256"]
    return json.loads(row["metadata"]), None if secret is None else bytes(secret)


# Anyone may register, so what registration adds is bounded: one upsert per registration
# counts it in its address's clock hour (its row lock serialises every process) and adds
# nothing once the hour holds ``limit``.
COUNT_REGISTRATION = NamedSQL("""
WITH counted AS (
    INSERT INTO oauth_registration_counts AS r (address, window_start, count)
    VALUES (:address, date_trunc('hour', now()), 1)
    ON CONFLICT (address, window_start) DO UPDATE SET count = r.count + 1
    WHERE r.count < :limit
    RETURNING count
)
SELECT EXISTS (SELECT FROM counted) AS allowed,
       ceil(extract(epoch FROM date_trunc('hour', now()) + interval '1 hour' - now()))::int
           AS retry_after
""")


async def count_registration(conn: Conn, address: str, limit: int) -> int | None:
    """Count a registration from ``address``: ``None`` when allowed, else the seconds
    until its hour is over (``Retry-After``)."""
    row = await COUNT_REGISTRATION.fetchrow(conn, address=address, limit=limit)
    assert row is not None
    return None if row["allowed"] else max(1, row["retry_after"])


# A client that never got a grant a day after registering is dropped (what an abandoned
# or hostile registration leaves), unless someone is on its consent page right now; so are
# the counts of hours gone by. In batches: the janitor comes back within a minute.
PRUNE = NamedSQL("""
WITH unused AS (
    DELETE FROM oauth_clients WHERE id IN (
        SELECT c.id FROM oauth_clients c
        WHERE c.created_at < now() - interval '1 day'
          AND NOT EXISTS (SELECT FROM oauth_grants g WHERE g.client_id = c.id)
          AND NOT EXISTS (SELECT FROM oauth_requests r
                          WHERE r.client_id = c.id AND r.expires_at > now())
        LIMIT 10000
    )
)
DELETE FROM oauth_registration_counts WHERE window_start < date_trunc('hour', now())
""")


async def prune(conn: Conn) -> None:
    await PRUNE.execute(conn)


# --- requests waiting on the consent page -------------------------------------------------

# Expired requests go as new ones come: the table holds only what someone may still answer.
INSERT_REQUEST = NamedSQL(f"""
WITH purged AS (DELETE FROM oauth_requests WHERE expires_at < now())
INSERT INTO oauth_requests (id, client_id, params, expires_at)
VALUES (:id, :client_id, :params::jsonb, now() + interval '{REQUEST_TTL_S} seconds')
""")

SELECT_REQUEST = NamedSQL("""
SELECT client_id, params FROM oauth_requests WHERE id = :id AND expires_at > now()
""")

SET_CSRF = NamedSQL("""
UPDATE oauth_requests SET csrf_sha256 = :csrf_sha256 WHERE id = :id AND expires_at > now()
""")

# Answered once: the row goes with the answer, so a form submitted twice finds nothing.
TAKE_REQUEST = NamedSQL("""
DELETE FROM oauth_requests
WHERE id = :id AND csrf_sha256 = :csrf_sha256 AND expires_at > now()
RETURNING client_id, params
""")

CHECK_CSRF = NamedSQL("""
SELECT 1 FROM oauth_requests
WHERE id = :id AND csrf_sha256 = :csrf_sha256 AND expires_at > now()
""")


@dataclass(frozen=True)
class Pending:
    """An authorization request waiting on the consent page."""

    id: str
    client_id: str
    params: dict[str, Any]  # the SDK's AuthorizationParams, as JSON


async def insert_request(conn: Conn, client_id: str, params: dict[str, Any]) -> str:
    request_id = secrets.token_urlsafe(24)
    await INSERT_REQUEST.execute(
        conn, id=request_id, client_id=client_id, params=json.dumps(params)
    )
    return request_id


def _pending(request_id: str, row: asyncpg.Record | None) -> Pending | None:
    if row is None:
        return None
    return Pending(request_id, row["client_id"], json.loads(row["params"]))


async def pending(conn: Conn, request_id: str) -> Pending | None:
    return _pending(request_id, await SELECT_REQUEST.fetchrow(conn, id=request_id))


async def new_csrf(conn: Conn, request_id: str) -> str | None:
    """A fresh CSRF token for the request's form (``None``: no such live request)."""
    csrf = secrets.token_urlsafe(24)
    done = await SET_CSRF.execute(conn, id=request_id, csrf_sha256=digest(csrf))
    return csrf if done == "UPDATE 1" else None


async def csrf_matches(conn: Conn, request_id: str, csrf: str) -> bool:
    return await CHECK_CSRF.fetchval(conn, id=request_id, csrf_sha256=digest(csrf)) is not None


async def take_request(conn: Conn, request_id: str, csrf: str) -> Pending | None:
    """The request, removed, if ``csrf`` is its form's token and it is still live."""
    row = await TAKE_REQUEST.fetchrow(conn, id=request_id, csrf_sha256=digest(csrf))
    return _pending(request_id, row)


# --- grants and codes ---------------------------------------------------------------------

INSERT_GRANT_AND_CODE = NamedSQL(f"""
WITH grant_row AS (
    INSERT INTO oauth_grants (id, workspace_id, key_id, client_id, scopes, store)
    VALUES (:grant_id, :workspace, :key_id, :client_id, :scopes, :store)
    RETURNING id
), purged AS (
    DELETE FROM oauth_codes WHERE expires_at < now() - interval '1 day'
)
INSERT INTO oauth_codes (code_sha256, grant_id, redirect_uri, redirect_uri_explicit,
                         code_challenge, resource, expires_at)
SELECT :code_sha256, id, :redirect_uri, :redirect_uri_explicit, :code_challenge, :resource,
       now() + interval '{CODE_TTL_S} seconds'
FROM grant_row
""")


@dataclass(frozen=True)
class Approval:
    """What the person chose on the consent page, for the key they proved."""

    workspace_id: str
    key_id: str
    scopes: list[str]
    store: str


async def grant_with_code(conn: Conn, pending: Pending, approval: Approval) -> str:
    """The grant the person approved and its authorization code (returned, stored hashed)."""
    code = new_secret(CODE_PREFIX)
    params = pending.params
    await INSERT_GRANT_AND_CODE.execute(
        conn,
        grant_id=new_id("grant"),
        workspace=approval.workspace_id,
        key_id=approval.key_id,
        client_id=pending.client_id,
        scopes=approval.scopes,
        store=approval.store,
        code_sha256=digest(code),
        redirect_uri=params["redirect_uri"],
        redirect_uri_explicit=params["redirect_uri_provided_explicitly"],
        code_challenge=params["code_challenge"],
        resource=params.get("resource"),
    )
    return code


# A grant is live while neither it nor the key that approved it is revoked.
LIVE_GRANT = """
JOIN oauth_grants g ON g.id = c.grant_id AND g.revoked_at IS NULL
JOIN api_keys k ON k.workspace_id = g.workspace_id AND k.id = g.key_id AND k.revoked_at IS NULL
"""

SELECT_CODE = NamedSQL(f"""
SELECT c.grant_id, g.client_id, g.scopes, c.redirect_uri, c.redirect_uri_explicit,
       c.code_challenge, c.resource, extract(epoch FROM c.expires_at)::float8 AS expires_at
FROM oauth_codes c {LIVE_GRANT}
WHERE c.code_sha256 = :code_sha256
""")

SPEND_CODE = NamedSQL("""
UPDATE oauth_codes SET used_at = now()
WHERE code_sha256 = :code_sha256 AND used_at IS NULL AND expires_at > now()
RETURNING grant_id
""")


async def code(conn: Conn, code: str) -> asyncpg.Record | None:
    """A code of a live grant, spent or not (spending it twice is the replay to catch)."""
    return await SELECT_CODE.fetchrow(conn, code_sha256=digest(code))


async def spend_code(conn: Conn, code: str) -> bool:
    return await SPEND_CODE.fetchval(conn, code_sha256=digest(code)) is not None


# --- tokens -------------------------------------------------------------------------------

ISSUE_TOKENS = NamedSQL(f"""
WITH g AS (
    SELECT g.id FROM oauth_grants g
    JOIN api_keys k ON k.workspace_id = g.workspace_id AND k.id = g.key_id
                   AND k.revoked_at IS NULL
    WHERE g.id = :grant_id AND g.revoked_at IS NULL
), used AS (
    UPDATE oauth_grants SET last_used_at = now() WHERE id IN (SELECT id FROM g)
), purged AS (
    DELETE FROM oauth_tokens WHERE grant_id IN (SELECT id FROM g) AND expires_at < now()
)
INSERT INTO oauth_tokens (token_sha256, grant_id, kind, scopes, resource, expires_at)
SELECT t.sha, g.id, t.kind, :scopes, :resource, now() + make_interval(secs => t.ttl)
FROM g, (VALUES (:access_sha256::bytea, 'access', :access_ttl::float8),
                (:refresh_sha256::bytea, 'refresh', {REFRESH_TTL_S}::float8)) t(sha, kind, ttl)
""")


@dataclass(frozen=True)
class Issued:
    access: str
    refresh: str


async def issue_tokens(
    conn: Conn, grant_id: str, scopes: list[str], resource: str | None, access_ttl_s: float
) -> Issued | None:
    """A new access and refresh token for a live grant; ``None`` if it is not (revoked, or
    its key is)."""
    access, refresh = new_secret(ACCESS_PREFIX), new_secret(REFRESH_PREFIX)
    done = await ISSUE_TOKENS.execute(
        conn,
        grant_id=grant_id,
        scopes=scopes,
        resource=resource,
        access_sha256=digest(access),
        refresh_sha256=digest(refresh),
        access_ttl=access_ttl_s,
    )
    return Issued(access, refresh) if done == "INSERT 0 2" else None


SELECT_TOKEN = NamedSQL(f"""
SELECT c.grant_id, g.client_id, c.scopes, c.resource,
       extract(epoch FROM c.expires_at)::bigint AS expires_at
FROM oauth_tokens c {LIVE_GRANT}
WHERE c.token_sha256 = :token_sha256 AND c.kind = :kind AND c.expires_at > now()
""")

SPEND_REFRESH = NamedSQL("""
UPDATE oauth_tokens SET used_at = now()
WHERE token_sha256 = :token_sha256 AND kind = 'refresh' AND used_at IS NULL
RETURNING grant_id
""")


async def token(conn: Conn, token: str, kind: str) -> asyncpg.Record | None:
    """A live token of a live grant (a spent refresh token included)."""
    return await SELECT_TOKEN.fetchrow(conn, token_sha256=digest(token), kind=kind)


async def spend_refresh(conn: Conn, token: str) -> bool:
    return await SPEND_REFRESH.fetchval(conn, token_sha256=digest(token)) is not None


# Revoking a grant ends its family: the codes and tokens go with it.
REVOKE_GRANT = NamedSQL("""
WITH g AS (
    UPDATE oauth_grants SET revoked_at = coalesce(revoked_at, now())
    WHERE id = :grant_id AND (:workspace::text IS NULL OR workspace_id = :workspace)
      AND (:key_id::text IS NULL OR key_id = :key_id)
    RETURNING id
), codes AS (
    DELETE FROM oauth_codes WHERE grant_id IN (SELECT id FROM g)
), tokens AS (
    DELETE FROM oauth_tokens WHERE grant_id IN (SELECT id FROM g)
)
SELECT id FROM g
""")


async def revoke_grant(
    conn: Conn, grant_id: str, *, workspace: str | None = None, key_id: str | None = None
) -> bool:
    """Revoke a grant (within ``workspace``, and of ``key_id``, when given); idempotent,
    ``False`` when there is no such grant."""
    found = await REVOKE_GRANT.fetchval(conn, grant_id=grant_id, workspace=workspace, key_id=key_id)
    return found is not None


# --- connected clients, for people ----------------------------------------------------------

SELECT_GRANTS = NamedSQL("""
SELECT g.id, g.key_id, g.client_id, c.metadata, g.scopes, g.store, g.created_at,
       g.last_used_at, g.revoked_at
FROM oauth_grants g JOIN oauth_clients c ON c.id = g.client_id
WHERE g.workspace_id = :workspace AND (:key_id::text IS NULL OR g.key_id = :key_id)
  AND (:revoked OR g.revoked_at IS NULL)
ORDER BY g.created_at DESC, g.id
""")


@dataclass(frozen=True)
class Grant:
    """A client a person connected: who approved it, what it may do, when it was used."""

    id: str
    key_id: str
    client_id: str
    client_name: str | None
    redirect_hosts: list[str]  # scheme://host[:port] of each redirect URI (redirect_target)
    scopes: list[str]
    store: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


def redirect_target(uri: str) -> str:
    """Where a redirect URI sends the browser: ``scheme://host``, with the port when it is
    not the scheme's default, as urllib parses it. The consent page and Connected apps show
    this; registration (``service.oauth.registration``) admits only URIs whose host urllib
    and a browser read alike, and a URI that hides its host reads here as what it is
    (``https://attacker.example?@claude.ai/cb`` is ``https://attacker.example``)."""
    parts = urlsplit(uri)
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:  # not a port (an older row): a browser goes nowhere; name the host
        port = None
    if port is not None and port != DEFAULT_PORTS.get(parts.scheme):
        host += f":{port}"
    return f"{parts.scheme}://{host}"


def _grant(row: asyncpg.Record) -> Grant:
    metadata = json.loads(row["metadata"])
    return Grant(
        id=row["id"],
        key_id=row["key_id"],
        client_id=row["client_id"],
        client_name=metadata.get("client_name"),
        redirect_hosts=sorted({redirect_target(u) for u in metadata.get("redirect_uris") or []}),
        scopes=list(row["scopes"]),
        store=row["store"],
        created_at=row["created_at"],
        last_used_at=row["last_used_at"],
        revoked_at=row["revoked_at"],
    )


async def list_grants(
    conn: Conn, workspace: str, *, key_id: str | None = None, revoked: bool = False
) -> list[Grant]:
    """The workspace's grants (only ``key_id``'s when given), newest first."""
    rows = await SELECT_GRANTS.fetch(conn, workspace=workspace, key_id=key_id, revoked=revoked)
    return [_grant(r) for r in rows]
