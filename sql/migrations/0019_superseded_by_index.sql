-- The memories a memory superseded, found by their link: a purge un-links them
-- (service.queries.memories.PURGE) and a PATCH of its scope checks their scopes
-- (service.write.supersession). Few memories are superseded, so the index is small.
CREATE INDEX memories_superseded_by ON memories (workspace_id, superseded_by)
    WHERE superseded_by IS NOT NULL;
