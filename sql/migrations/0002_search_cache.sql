-- The search answer cache (SPEC §3.3 cache_control): one cached query per store, memory
-- model and set of request options. An entry is valid only while its store's version is
-- the one it was computed at (every write bumps the version), and until it expires.

CREATE TABLE search_cache (
    workspace_id   text        NOT NULL,
    store_id       text        NOT NULL,
    model          text        NOT NULL,
    options_sha256 bytea       NOT NULL,
    query          text        NOT NULL,
    query_tokens   integer     NOT NULL,
    result_tokens  integer     NOT NULL,
    store_version  bigint      NOT NULL,
    memory_ids     text[]      NOT NULL,
    response       bytea       NOT NULL,
    expires_at     timestamptz NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, store_id, model, options_sha256),
    FOREIGN KEY (workspace_id, store_id) REFERENCES stores (workspace_id, id) ON DELETE CASCADE
);
CREATE INDEX search_cache_expiry ON search_cache (expires_at);
