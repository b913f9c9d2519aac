-- Rows re-queued by `mneme reembed` (a new model, or failed ones) are background work:
-- the worker's claim (embeddings.worker.CLAIM) takes every new write and edit first, so
-- re-embedding a large database does not hold back the vector of the memory an agent
-- just wrote. Set by the re-queue; an edit that queues the memory again clears it. Read
-- only while embedding_status = 'pending'.
ALTER TABLE memories ADD COLUMN embedding_background boolean NOT NULL DEFAULT false;

DROP INDEX memories_embedding_backlog;
CREATE INDEX memories_embedding_backlog
    ON memories (workspace_id, embedding_background, updated_at, id)
    WHERE embedding_status = 'pending';
