-- Mneme schema, version 1: tenancy, access, stores, memories, versions, usage,
-- idempotency and rate-limit counters (SPEC §1–§2).
--
-- Plain SQL: the runner applies it in one transaction; `psql -f` applies it as is.
-- Every table carries workspace_id as the first column of its primary key so the schema
-- can be distributed on that column (Citus). api_keys is looked up by secret hash before
-- the workspace is known: under Citus it is a reference table.

CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS pg_trgm;

-- Tenancy -------------------------------------------------------------------------------

CREATE TABLE workspaces (
    id          text        NOT NULL PRIMARY KEY,
    name        text        NOT NULL,
    tier        text        NOT NULL DEFAULT 'free' CHECK (tier IN ('free', 'pro', 'scale')),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX workspaces_name_key ON workspaces (lower(name));

CREATE TABLE members (
    workspace_id text        NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    id           text        NOT NULL,
    kind         text        NOT NULL CHECK (kind IN ('human', 'agent')),
    name         text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, id)
);

CREATE TABLE rooms (
    workspace_id text        NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    id           text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, id)
);

-- Membership may name a member that is not registered yet: sync order is free (SPEC §1).
CREATE TABLE room_members (
    workspace_id text        NOT NULL,
    room_id      text        NOT NULL,
    member_id    text        NOT NULL,
    added_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, room_id, member_id),
    FOREIGN KEY (workspace_id, room_id) REFERENCES rooms (workspace_id, id) ON DELETE CASCADE
);
CREATE INDEX room_members_by_member ON room_members (workspace_id, member_id);

CREATE TABLE api_keys (
    workspace_id  text        NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    id            text        NOT NULL,
    kind          text        NOT NULL CHECK (kind IN ('personal', 'service')),
    member_id     text,
    scopes        text[]      NOT NULL,
    name          text,
    secret_sha256 bytea       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    revoked_at    timestamptz,
    PRIMARY KEY (workspace_id, id),
    CHECK ((kind = 'personal') = (member_id IS NOT NULL)),
    CHECK (scopes <@ ARRAY['memory:read', 'memory:write', 'admin']::text[]),
    FOREIGN KEY (workspace_id, member_id) REFERENCES members (workspace_id, id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX api_keys_secret_key ON api_keys (secret_sha256);

-- Who may read a scope. The one readability predicate: every read path calls it.
--   workspace            every member of the workspace
--   room:<id>            members of that room (the caller's rooms are passed in)
--   pair:<human>:<agent> only those two members
--   anything else        service keys only
-- A single-expression SQL function, so the planner inlines it into the calling query.
CREATE FUNCTION mneme_readable(scope text, is_service boolean, member text, rooms text[])
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT is_service
        OR scope = 'workspace'
        OR (starts_with(scope, 'room:') AND substr(scope, 6) = ANY (rooms))
        OR (starts_with(scope, 'pair:') AND member IS NOT NULL
            AND cardinality(string_to_array(substr(scope, 6), ':')) = 2
            AND member = ANY (string_to_array(substr(scope, 6), ':')))
$$;

-- Stores and speakers -------------------------------------------------------------------

CREATE TABLE stores (
    workspace_id   text        NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    id             text        NOT NULL,
    name           text        NOT NULL,
    description    text        NOT NULL DEFAULT '',
    metadata       jsonb       NOT NULL DEFAULT '{}'::jsonb,
    strip_temporal boolean     NOT NULL DEFAULT false,
    -- Bumped by every write to the store; the search cache is keyed on it.
    version        bigint      NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, id)
);
CREATE UNIQUE INDEX stores_name_key ON stores (workspace_id, lower(name));

CREATE TABLE speakers (
    workspace_id text        NOT NULL,
    store_id     text        NOT NULL,
    name         text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, store_id, name),
    FOREIGN KEY (workspace_id, store_id) REFERENCES stores (workspace_id, id) ON DELETE CASCADE
);

-- Memories ------------------------------------------------------------------------------

CREATE TABLE memories (
    workspace_id          text        NOT NULL,
    id                    text        NOT NULL,
    store_id              text        NOT NULL,
    kind                  text        NOT NULL DEFAULT 'text' CHECK (kind IN ('text', 'image')),
    text                  text        NOT NULL,
    media                 bytea,
    media_type            text,
    scope                 text        NOT NULL DEFAULT 'workspace',
    tier                  text        NOT NULL DEFAULT 'hindsight' CHECK (tier IN ('core', 'hindsight')),
    fact_type             text,
    status                text        NOT NULL DEFAULT 'active'
                                      CHECK (status IN ('active', 'archived', 'deleted')),
    provider              text        NOT NULL DEFAULT 'mneme',
    provider_ref          text        NOT NULL,
    entity_refs           text[]      NOT NULL DEFAULT '{}',
    proof_count           integer,
    category              text        NOT NULL DEFAULT 'general',
    importance            double precision NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1),
    speaker               text,
    event_date            timestamptz,
    superseded_by         text,
    path                  text COLLATE "C",
    metadata              jsonb       NOT NULL DEFAULT '{}'::jsonb,
    content_sha256        text        NOT NULL,
    content_size_bytes    integer     NOT NULL,
    expires_at            timestamptz,
    transitory            boolean     NOT NULL DEFAULT false,
    first_seen_at         timestamptz NOT NULL DEFAULT now(),
    last_used_at          timestamptz NOT NULL DEFAULT now(),
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    -- Filled by the embedding worker. The table is the queue: pending rows are the work.
    embedding             vector(384),
    embedding_model       text,
    embedding_status      text        NOT NULL DEFAULT 'pending'
                                      CHECK (embedding_status IN ('pending', 'ready', 'failed')),
    -- Bumped whenever what gets embedded changes, so a worker never stores a stale vector.
    embedding_generation  integer     NOT NULL DEFAULT 0,
    embedding_attempts    smallint    NOT NULL DEFAULT 0,
    embedding_error       text,
    embedding_lease_until timestamptz,
    search_tsv            tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) STORED,
    PRIMARY KEY (workspace_id, id),
    FOREIGN KEY (workspace_id, store_id) REFERENCES stores (workspace_id, id) ON DELETE CASCADE,
    CHECK (octet_length(text) <= 102400),
    CHECK (jsonb_typeof(metadata) = 'object')
);

-- Browse: the keyset recency window, workspace-wide and per store.
CREATE INDEX memories_window ON memories (workspace_id, created_at DESC, id DESC);
CREATE INDEX memories_store_window ON memories (workspace_id, store_id, created_at DESC, id DESC);
-- Sync identity.
CREATE UNIQUE INDEX memories_provider_ref_key
    ON memories (workspace_id, store_id, provider, provider_ref);
-- Path-addressed memories: unique among non-deleted rows; listing is a range scan on it.
CREATE UNIQUE INDEX memories_path_key
    ON memories (workspace_id, store_id, path)
    WHERE path IS NOT NULL AND status <> 'deleted';
-- Exact-duplicate detection on writes.
CREATE INDEX memories_dedupe
    ON memories (workspace_id, store_id, content_sha256)
    WHERE status = 'active' AND path IS NULL;
-- The embedding queue.
CREATE INDEX memories_embedding_queue
    ON memories (updated_at)
    WHERE embedding_status = 'pending';
-- Retention.
CREATE INDEX memories_expiry
    ON memories (expires_at)
    WHERE status = 'active' AND expires_at IS NOT NULL;
CREATE INDEX memories_transitory
    ON memories (last_used_at)
    WHERE status = 'active' AND transitory;
-- Retrieval.
CREATE INDEX memories_search_tsv ON memories USING gin (search_tsv);
CREATE INDEX memories_embedding ON memories USING hnsw (embedding vector_cosine_ops);

-- Texts longer than the model's window: one vector per further chunk (chunk 0 is the
-- memory's own embedding); the best chunk speaks for the memory.
CREATE TABLE memory_chunks (
    workspace_id text        NOT NULL,
    memory_id    text        NOT NULL,
    chunk_index  integer     NOT NULL CHECK (chunk_index >= 1),
    embedding    vector(384) NOT NULL,
    PRIMARY KEY (workspace_id, memory_id, chunk_index),
    FOREIGN KEY (workspace_id, memory_id) REFERENCES memories (workspace_id, id) ON DELETE CASCADE
);
CREATE INDEX memory_chunks_embedding ON memory_chunks USING hnsw (embedding vector_cosine_ops);

-- The audit trail: one immutable row per change of text, path, metadata or status.
CREATE TABLE memory_versions (
    workspace_id   text        NOT NULL,
    id             text        NOT NULL,
    memory_id      text        NOT NULL,
    operation      text        NOT NULL CHECK (operation IN ('created', 'modified', 'deleted')),
    actor          text,
    text           text,
    metadata       jsonb,
    content_sha256 text,
    path           text COLLATE "C",
    status         text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, id),
    FOREIGN KEY (workspace_id, memory_id) REFERENCES memories (workspace_id, id) ON DELETE CASCADE
);
CREATE INDEX memory_versions_by_memory ON memory_versions (workspace_id, memory_id, id DESC);

-- Billing, idempotency, rate limits ----------------------------------------------------

CREATE TABLE usage_daily (
    workspace_id text           NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    day          date           NOT NULL,
    endpoint     text           NOT NULL,
    requests     bigint         NOT NULL DEFAULT 0,
    units        numeric(20, 4) NOT NULL DEFAULT 0,
    PRIMARY KEY (workspace_id, day, endpoint)
);

CREATE TABLE idempotency_keys (
    workspace_id   text        NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    key            text        NOT NULL,
    request_sha256 bytea       NOT NULL,
    status         integer     NOT NULL,
    response       bytea       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

-- Requests per workspace per minute, shared by every service instance. UNLOGGED: the
-- counts are worth nothing after a crash, and skipping the WAL spares every request a
-- commit flush (a crash just resets the current minute's counts).
CREATE UNLOGGED TABLE rate_limit_counters (
    workspace_id text        NOT NULL,
    window_start timestamptz NOT NULL,
    count        integer     NOT NULL,
    PRIMARY KEY (workspace_id, window_start)
);

-- Count one request against a workspace's limit, if the limit allows it. A sliding-window
-- estimate over one-minute buckets: the previous minute's count weighted by how much of
-- it still overlaps the last 60 seconds, plus this minute's. Check and increment are one
-- statement; the counter row's lock serialises instances. Refused requests are not
-- counted. Returns the counts so the caller can compute Retry-After.
CREATE FUNCTION mneme_rate_hit(ws text, per_minute integer)
RETURNS TABLE (allowed boolean, current_count integer, previous_count integer,
               elapsed_fraction float8)
LANGUAGE sql VOLATILE
AS $$
    WITH w AS (
        SELECT date_trunc('minute', now()) AS start,
               extract(epoch FROM now() - date_trunc('minute', now()))::float8 / 60.0 AS elapsed
    ), prev AS (
        SELECT coalesce((SELECT c.count FROM rate_limit_counters c, w
                         WHERE c.workspace_id = ws
                           AND c.window_start = w.start - interval '1 minute'), 0) AS count
    ), hit AS (
        INSERT INTO rate_limit_counters AS c (workspace_id, window_start, count)
        SELECT ws, w.start, 1 FROM w, prev WHERE prev.count * (1 - w.elapsed) + 1 <= per_minute
        ON CONFLICT (workspace_id, window_start) DO UPDATE
            SET count = c.count + 1
            WHERE c.count + 1 + (SELECT prev.count * (1 - w.elapsed) FROM w, prev) <= per_minute
        RETURNING c.count
    )
    SELECT (SELECT count FROM hit) IS NOT NULL,
           coalesce((SELECT c.count FROM rate_limit_counters c, w
                     WHERE c.workspace_id = ws AND c.window_start = w.start), 0),
           prev.count,
           w.elapsed
    FROM w, prev
$$;
