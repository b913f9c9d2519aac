"""API keys: creation (secret shown once), lookup by SHA-256, listing, revocation.

Secrets never touch the database; only their SHA-256 does. ``authenticate`` fetches the
key, its workspace's tier and, for a personal key, the member's rooms in one round trip:
everything the readability predicate needs for the rest of the request.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from service.ids import new_id
from service.queries import Conn, ratelimit
from service.queries.named import NamedSQL

SCOPES = ("memory:read", "memory:write", "admin")
KINDS = ("personal", "service")
SECRET_PREFIX = "mneme_sk_"  # noqa: S105 - a label, not a secret


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


@dataclass(frozen=True)
class ApiKey:
    id: str
    kind: str
    member: str | None
    scopes: list[str]
    name: str | None
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key, its workspace, and what it may read."""

    key_id: str
    workspace_id: str
    workspace_tier: str
    kind: str
    member: str | None
    scopes: frozenset[str]
    rooms: list[str]
    # An OAuth access token's: the default store its grant chose (None for a key).
    grant_store: str | None = None

    @property
    def is_service(self) -> bool:
        return self.kind == "service"

    @property
    def reads(self) -> bool:
        """Whether this key may read memories at all (``memory:read``). A key that may
        only write gets back what it wrote, never what was stored (SPEC §9)."""
        return "memory:read" in self.scopes

    @property
    def visibility(self) -> str:
        """What this key may read, as one string: two keys with the same visibility read
        exactly the same memories (the arguments of ``mneme_readable``). Whatever is kept
        for a reader (a cached search answer) is kept under it."""
        if self.is_service:
            return "service"
        return f"member:{self.member} rooms:{','.join(sorted(self.rooms))}"


KEY_COLUMNS = "id, kind, member_id AS member, scopes, name, created_at, revoked_at"

INSERT_KEY = NamedSQL(f"""
INSERT INTO api_keys (workspace_id, id, kind, member_id, scopes, name, secret_sha256)
VALUES (:workspace, :id, :kind, :member, :scopes, :name, :secret_sha256)
RETURNING {KEY_COLUMNS}
""")


async def create_key(
    conn: Conn,
    workspace_id: str,
    *,
    kind: str,
    member: str | None,
    scopes: list[str],
    name: str | None,
    secret: str | None = None,
) -> tuple[ApiKey, str]:
    """Store a new key; returns it with its secret, which is never readable again."""
    secret = secret or new_secret()
    row = await INSERT_KEY.fetchrow(
        conn,
        workspace=workspace_id,
        id=new_id("key"),
        kind=kind,
        member=member,
        scopes=scopes,
        name=name,
        secret_sha256=digest(secret),
    )
    assert row is not None
    return ApiKey(**row), secret


SELECT_KEYS = NamedSQL(f"""
SELECT {KEY_COLUMNS} FROM api_keys WHERE workspace_id = :workspace ORDER BY id
""")


async def list_keys(conn: Conn, workspace_id: str) -> list[ApiKey]:
    return [ApiKey(**r) for r in await SELECT_KEYS.fetch(conn, workspace=workspace_id)]


REVOKE_KEY = NamedSQL("""
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE workspace_id = :workspace AND id = :id
RETURNING id
""")


async def revoke_key(conn: Conn, workspace_id: str, key_id: str) -> bool:
    """Idempotent; ``False`` when the workspace has no such key."""
    return await REVOKE_KEY.fetchval(conn, workspace=workspace_id, id=key_id) is not None


_ROOMS = """
       CASE WHEN k.member_id IS NULL THEN '{}'::text[] ELSE
           coalesce((SELECT array_agg(rm.room_id) FROM room_members rm
                     WHERE rm.workspace_id = k.workspace_id AND rm.member_id = k.member_id),
                    '{}')
       END AS rooms"""
_AUTHENTICATE = f"""
SELECT k.id, k.workspace_id, w.tier, k.kind, k.member_id, k.scopes, k.secret_sha256,
       NULL::text AS grant_store, {_ROOMS}
FROM api_keys k
JOIN workspaces w ON w.id = k.workspace_id
WHERE k.secret_sha256 = :secret_sha256 AND k.revoked_at IS NULL
"""
# An OAuth access token (sql/migrations/0021_oauth.sql) acts as the key that approved its
# grant, with that key's scopes narrowed to the grant's: a revoked key or grant, or an
# expired token, finds no row.
_AUTHENTICATE_TOKEN = f"""
SELECT k.id, k.workspace_id, w.tier, k.kind, k.member_id,
       ARRAY(SELECT unnest(k.scopes) INTERSECT SELECT unnest(t.scopes)) AS scopes,
       t.token_sha256 AS secret_sha256, g.store AS grant_store, {_ROOMS}
FROM oauth_tokens t
JOIN oauth_grants g ON g.id = t.grant_id AND g.revoked_at IS NULL
JOIN api_keys k ON k.workspace_id = g.workspace_id AND k.id = g.key_id AND k.revoked_at IS NULL
JOIN workspaces w ON w.id = k.workspace_id
WHERE t.token_sha256 = :secret_sha256 AND t.kind = 'access' AND t.expires_at > now()
"""
AUTHENTICATE = NamedSQL(_AUTHENTICATE)


def _principal(row: asyncpg.Record, presented: bytes) -> Principal | None:
    # The index finds the row by hash; comparing the stored hash in constant time as well
    # keeps the final decision free of data-dependent timing.
    if not hmac.compare_digest(bytes(row["secret_sha256"]), presented):
        return None
    return _as_principal(row)


def _as_principal(row: asyncpg.Record) -> Principal:
    return Principal(
        key_id=row["id"],
        workspace_id=row["workspace_id"],
        workspace_tier=row["tier"],
        kind=row["kind"],
        member=row["member_id"],
        scopes=frozenset(row["scopes"]),
        rooms=list(row["rooms"]),
        grant_store=row["grant_store"],
    )


KEY_PRINCIPAL = NamedSQL(f"""
SELECT k.id, k.workspace_id, w.tier, k.kind, k.member_id, k.scopes,
       NULL::text AS grant_store, {_ROOMS}
FROM api_keys k
JOIN workspaces w ON w.id = k.workspace_id
WHERE k.workspace_id = :workspace AND k.id = :id AND k.revoked_at IS NULL
""")


async def principal_of_key(conn: Conn, workspace_id: str, key_id: str) -> Principal | None:
    """The principal a key acts as, as of now (its rooms too), for work done on its
    behalf without it presented (a webhook's deliveries); ``None`` once it is revoked."""
    row = await KEY_PRINCIPAL.fetchrow(conn, workspace=workspace_id, id=key_id)
    return None if row is None else _as_principal(row)


async def authenticate(conn: Conn, secret: str) -> Principal | None:
    """The principal for a presented secret; ``None`` if unknown or revoked."""
    presented = digest(secret)
    row = await AUTHENTICATE.fetchrow(conn, secret_sha256=presented)
    return None if row is None else _principal(row, presented)


# Authentication and the workspace's rate-limit hit in one round trip: every API request
# pays for exactly one statement before its handler runs. An unknown key matches no row,
# so it is never counted.
#
# The hit is a write, and the statement its own transaction: it commits without waiting
# for the WAL to reach the disk (synchronous_commit off for this transaction alone, as SET
# LOCAL; the session keeps its setting). A crash can lose the last fraction of a second of
# counts, never anything else; no request waits for a disk flush before its handler runs
# (a write waits for one, its own). A flush costs what the disk's fsync costs: 0.13 ms on
# the development VM (pg_test_fsync), where single-write and search A/B runs could not
# tell the difference; more on network block storage.
def _counted(authenticate: str) -> NamedSQL:
    return NamedSQL(f"""
WITH k AS (
    SELECT a.*,
           CASE a.tier WHEN 'free' THEN :free::int WHEN 'pro' THEN :pro::int ELSE :scale::int END
           AS rate_limit
    FROM ({authenticate}) a
), lazy_commit AS (
    SELECT set_config('synchronous_commit', 'off', true)
)
SELECT k.*, r.allowed, r.current_count, r.previous_count, r.elapsed_fraction
FROM k, lazy_commit, LATERAL mneme_rate_hit(k.workspace_id, k.rate_limit) r
""")


AUTHENTICATE_AND_COUNT = _counted(_AUTHENTICATE)
AUTHENTICATE_TOKEN_AND_COUNT = _counted(_AUTHENTICATE_TOKEN)
TOKEN_PREFIX = "mneme_at_"  # noqa: S105 - an OAuth access token's label (queries/oauth.py)


def is_token(secret: str) -> bool:
    """Whether a presented secret is an OAuth access token rather than a key."""
    return secret.startswith(TOKEN_PREFIX)


async def authenticate_and_count(
    conn: Conn, secret: str, limits: Mapping[str, int]
) -> tuple[Principal, ratelimit.Decision] | None:
    """The principal and its workspace's rate-limit decision; ``None`` for a bad key (or
    OAuth access token: ``is_token``)."""
    presented = digest(secret)
    statement = AUTHENTICATE_TOKEN_AND_COUNT if is_token(secret) else AUTHENTICATE_AND_COUNT
    row = await statement.fetchrow(
        conn,
        secret_sha256=presented,
        free=limits["free"],
        pro=limits["pro"],
        scale=limits["scale"],
    )
    if row is None or (principal := _principal(row, presented)) is None:
        return None
    decision = ratelimit.decision(
        row["rate_limit"],
        row["allowed"],
        row["current_count"],
        row["previous_count"],
        row["elapsed_fraction"],
    )
    return principal, decision


KEY_WORKSPACE = NamedSQL("SELECT workspace_id FROM api_keys WHERE secret_sha256 = :secret_sha256")


async def key_workspace(conn: Conn, secret: str) -> str | None:
    """The workspace a secret is registered in (revoked or not), if any."""
    value: str | None = await KEY_WORKSPACE.fetchval(conn, secret_sha256=digest(secret))
    return value
