-- A large store's own HNSW index (service.store_indexes).
--
-- pgvector's one HNSW index over every store's vectors (memories_embedding) serves a
-- store's search by walking the graph of all of them and dropping the other stores' rows
-- after the walk: for a store holding a fifth of the memories, five times the walk its
-- answer needs (measured: the vector arm of a 20,000-memory store among 100,000, 16 ms).
-- A partial index per large store (WHERE workspace_id = '…' AND store_id = '…'), which
-- the planner picks for that store's searches (their plans are made for their values),
-- is walked for that store alone (5 ms). Built by the janitor, one at a time across
-- every instance (CREATE INDEX CONCURRENTLY: writes go on meanwhile).
--
-- A row is written before its index is built (built_at NULL) and stamped when it is
-- valid, so a build cut short (a crash) leaves a row that says which index to drop.
CREATE TABLE store_vector_indexes (
    workspace_id text        NOT NULL,
    store_id     text        NOT NULL,
    index_name   text        NOT NULL,
    built_at     timestamptz,
    PRIMARY KEY (workspace_id, store_id)
);
