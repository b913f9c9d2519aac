-- Whether a memory has vectors in memory_chunks (a text longer than the model's window),
-- so that search's chunk arm visits only such memories. Without it, an exact search of a
-- store probed memory_chunks once per memory of the store, chunked or not: 0.4 ms of a
-- 1.5 ms retrieval at 663 memories, none of them chunked. Set by the embedding worker
-- with the chunks themselves (embeddings.worker.STORE).
ALTER TABLE memories ADD COLUMN chunked boolean NOT NULL DEFAULT false;

UPDATE memories m SET chunked = true
WHERE EXISTS (SELECT 1 FROM memory_chunks c WHERE c.workspace_id = m.workspace_id AND c.memory_id = m.id);

CREATE INDEX memories_chunked ON memories (workspace_id, store_id) WHERE chunked AND status = 'active';
