-- OAuth 2.1 for /mcp (issue 46): Mneme is its own authorization server. A person approves
-- a client with a Mneme key on the consent page; the client then holds tokens that act
-- with exactly that key's rights, narrowed to the granted scopes. Every secret here
-- (client secret, code, access and refresh token) is stored as its SHA-256 only.

-- Clients registered by dynamic client registration (RFC 7591). Not a workspace's: a
-- client registers before anyone has said who they are.
CREATE TABLE oauth_clients (
    id            text        PRIMARY KEY,
    metadata      jsonb       NOT NULL,  -- the registered metadata, without the secret
    secret_sha256 bytea,                 -- NULL for a public client (auth method "none")
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- An authorization request waiting on the consent page: the parameters the SDK validated,
-- and the hash of the CSRF token the page's form carries. Short-lived.
CREATE TABLE oauth_requests (
    id          text        PRIMARY KEY,
    client_id   text        NOT NULL REFERENCES oauth_clients (id) ON DELETE CASCADE,
    params      jsonb       NOT NULL,
    csrf_sha256 bytea,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX oauth_requests_expiry ON oauth_requests (expires_at);

-- What a person approved: a client acting for a key, within scopes, with a default
-- store. Deleting the key (or its member) deletes the grant; revoking the key ends its
-- use (tokens authenticate through the key's row). Revoking the grant ends every code
-- and token issued under it: its family.
CREATE TABLE oauth_grants (
    id           text        PRIMARY KEY,
    workspace_id text        NOT NULL,
    key_id       text        NOT NULL,
    client_id    text        NOT NULL REFERENCES oauth_clients (id) ON DELETE CASCADE,
    scopes       text[]      NOT NULL CHECK (
        scopes <@ ARRAY['memory:read', 'memory:write']::text[] AND 'memory:read' = ANY (scopes)
    ),
    store        text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz,
    FOREIGN KEY (workspace_id, key_id) REFERENCES api_keys (workspace_id, id) ON DELETE CASCADE
);
CREATE INDEX oauth_grants_key ON oauth_grants (workspace_id, key_id);

-- Authorization codes: single use (used_at), bound to the client (through the grant), the
-- redirect URI and the PKCE S256 challenge, valid for at most 60 s.
CREATE TABLE oauth_codes (
    code_sha256           bytea       PRIMARY KEY,
    grant_id              text        NOT NULL REFERENCES oauth_grants (id) ON DELETE CASCADE,
    redirect_uri          text        NOT NULL,
    redirect_uri_explicit boolean     NOT NULL,
    code_challenge        text        NOT NULL,
    resource              text,
    expires_at            timestamptz NOT NULL,
    used_at               timestamptz,
    created_at            timestamptz NOT NULL DEFAULT now(),
    CHECK (expires_at <= created_at + interval '60 seconds')
);
CREATE INDEX oauth_codes_grant ON oauth_codes (grant_id);

-- Access tokens (≤ 1 h) and refresh tokens (rotated: a used one is spent, and presenting
-- it again revokes the grant).
CREATE TABLE oauth_tokens (
    token_sha256 bytea       PRIMARY KEY,
    grant_id     text        NOT NULL REFERENCES oauth_grants (id) ON DELETE CASCADE,
    kind         text        NOT NULL CHECK (kind IN ('access', 'refresh')),
    scopes       text[]      NOT NULL,
    resource     text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    used_at      timestamptz,
    CHECK (kind = 'refresh' OR expires_at <= created_at + interval '1 hour')
);
CREATE INDEX oauth_tokens_grant ON oauth_tokens (grant_id);
CREATE INDEX oauth_tokens_expiry ON oauth_tokens (expires_at);
