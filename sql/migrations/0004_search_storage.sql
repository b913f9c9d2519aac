-- Search reads at scale (issue 6): rows stay whole, full text is indexed per store.

-- A memory's row holds its 1.5 kB vector (0003: STORAGE PLAIN), so most rows pass the
-- 2 kB at which PostgreSQL starts moving values out of the row: the text and its
-- tsvector went to the TOAST table, and every full-text match and BM25 score fetched
-- them from there (measured at 100k memories: a 1,000-memory store's statement read
-- 8,500 buffers in 14 ms; 6 ms with the rows whole). Rows are kept whole up to
-- a page; a text long enough to pass that is still compressed and moved out. Applies to
-- rows written from now on (VACUUM FULL memories rewrites the older ones).
ALTER TABLE memories SET (toast_tuple_target = 8160);
ALTER TABLE memory_chunks SET (toast_tuple_target = 8160);

-- The full-text index keyed by store first (btree_gin): a big store's match reads its
-- own postings, not every store's (measured at 100k memories, a 20,000-memory store:
-- 7,418 rows fetched to keep 1,371, 10 ms; 1,371 rows and 3 ms with this index).
-- The rebuild locks memories, reads included, until this migration commits (the search
-- benchmark builds this index over 1M memories in 8 s, with more maintenance memory).
CREATE EXTENSION IF NOT EXISTS btree_gin;
SET LOCAL maintenance_work_mem = '256MB';
DROP INDEX memories_search_tsv;
CREATE INDEX memories_search_tsv ON memories USING gin (store_id, search_tsv);
