-- When a search last returned a memory (SPEC: last_used_at "becomes now() whenever search
-- returns the memory"), kept in a narrow table of its own.
--
-- Stamping memories.last_used_at rewrote the memory's row, and a memory's row is wide
-- (its 1.5 kB vector lives in it): a page has no room for the new version beside the
-- old, so the update cannot be HOT and adds an entry to every index of memories, HNSW
-- included. Measured at 100k memories under 16 searching clients: ~1 ms of PostgreSQL
-- per memory returned, as much as the search itself, and the HNSW index grows with
-- every search. Here a stamp updates a ~60-byte row whose only index is its key.
--
-- What a memory reports as last_used_at is the later of memories.last_used_at (set at
-- creation, or by a write that gives lastUsedAt, which also clears the row here) and
-- the time here: see LAST_USED_AT in service/queries/memories.py.
CREATE TABLE memory_uses (
    workspace_id text        NOT NULL,
    memory_id    text        NOT NULL,
    last_used_at timestamptz NOT NULL,
    PRIMARY KEY (workspace_id, memory_id),
    FOREIGN KEY (workspace_id, memory_id) REFERENCES memories (workspace_id, id)
        ON DELETE CASCADE
) WITH (fillfactor = 70);  -- room on each page for the next stamp of its rows (HOT)
