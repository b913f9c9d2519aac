"""API keys: creation (secret shown once), lookup by SHA-256, listing, revocation.

Secrets never touch the database; only their SHA-256 does. ``authenticate`` fetches the
key, its workspace's tier and, for a personal key, the member's rooms in one round trip:
everything the readability predicate needs for the rest of the request.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime

from service.ids import new_id
from service.queries import Conn

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

    @property
    def is_service(self) -> bool:
        return self.kind == "service"


KEY_COLUMNS = "id, kind, member_id AS member, scopes, name, created_at, revoked_at"

INSERT_KEY = f"""
INSERT INTO api_keys (workspace_id, id, kind, member_id, scopes, name, secret_sha256)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING {KEY_COLUMNS}
"""


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
    row = await conn.fetchrow(
        INSERT_KEY, workspace_id, new_id("key"), kind, member, scopes, name, digest(secret)
    )
    assert row is not None
    return ApiKey(**row), secret


SELECT_KEYS = f"""
SELECT {KEY_COLUMNS} FROM api_keys WHERE workspace_id = $1 ORDER BY id
"""


async def list_keys(conn: Conn, workspace_id: str) -> list[ApiKey]:
    return [ApiKey(**r) for r in await conn.fetch(SELECT_KEYS, workspace_id)]


REVOKE_KEY = """
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE workspace_id = $1 AND id = $2
RETURNING id
"""


async def revoke_key(conn: Conn, workspace_id: str, key_id: str) -> bool:
    """Idempotent; ``False`` when the workspace has no such key."""
    return await conn.fetchval(REVOKE_KEY, workspace_id, key_id) is not None


AUTHENTICATE = """
SELECT k.id, k.workspace_id, w.tier, k.kind, k.member_id, k.scopes, k.secret_sha256,
       CASE WHEN k.member_id IS NULL THEN '{}'::text[] ELSE
           coalesce((SELECT array_agg(rm.room_id) FROM room_members rm
                     WHERE rm.workspace_id = k.workspace_id AND rm.member_id = k.member_id),
                    '{}')
       END AS rooms
FROM api_keys k
JOIN workspaces w ON w.id = k.workspace_id
WHERE k.secret_sha256 = $1 AND k.revoked_at IS NULL
"""


async def authenticate(conn: Conn, secret: str) -> Principal | None:
    """The principal for a presented secret; ``None`` if unknown or revoked."""
    presented = digest(secret)
    row = await conn.fetchrow(AUTHENTICATE, presented)
    # The index finds the row by hash; comparing the stored hash in constant time as well
    # keeps the final decision free of data-dependent timing.
    if row is None or not hmac.compare_digest(bytes(row["secret_sha256"]), presented):
        return None
    return Principal(
        key_id=row["id"],
        workspace_id=row["workspace_id"],
        workspace_tier=row["tier"],
        kind=row["kind"],
        member=row["member_id"],
        scopes=frozenset(row["scopes"]),
        rooms=list(row["rooms"]),
    )


KEY_WORKSPACE = "SELECT workspace_id FROM api_keys WHERE secret_sha256 = $1"


async def key_workspace(conn: Conn, secret: str) -> str | None:
    """The workspace a secret is registered in (revoked or not), if any."""
    value: str | None = await conn.fetchval(KEY_WORKSPACE, digest(secret))
    return value
