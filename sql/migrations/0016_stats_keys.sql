-- Keys for the BM25 statistics (0003), for Citus: it moves shards by logical
-- replication, which needs a replica identity (a primary key) on every table that is
-- updated or deleted from, and the janitor's compaction deletes from both. Their rows
-- are deltas (several per lexeme and store until compacted), so no column set is unique:
-- each row gets a number of its own, keyed after the workspace and store, so the key
-- includes the distribution column. Adding the identity column fills it for the rows
-- there are (a rewrite of these two tables, which compaction keeps small).

ALTER TABLE search_terms ADD COLUMN delta_id bigint GENERATED ALWAYS AS IDENTITY;
ALTER TABLE search_terms ADD PRIMARY KEY (workspace_id, store_id, delta_id);

ALTER TABLE search_store_stats ADD COLUMN delta_id bigint GENERATED ALWAYS AS IDENTITY;
ALTER TABLE search_store_stats ADD PRIMARY KEY (workspace_id, store_id, delta_id);
