-- The embedding worker's claim shares each batch among the workspaces with memories
-- waiting (embeddings.worker.CLAIM): it finds them by a skip scan of this index and takes
-- each one's oldest from its part of it. memories_embedding_queue (updated_at) stays for
-- the age of the oldest waiting memory (/metrics).
CREATE INDEX memories_embedding_backlog
    ON memories (workspace_id, updated_at, id)
    WHERE embedding_status = 'pending';
