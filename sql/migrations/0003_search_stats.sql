-- Search at scale.
--
-- 1. BM25 statistics per store, kept exact by triggers on memories: how many active
--    memories there are and their total length, how many of them are the caller's own
--    ("me") or images, and in how many each lexeme occurs. Computing these per query
--    costs a scan of the store; here a search reads a few index entries. The triggers
--    only ever INSERT deltas (+1/-1 per lexeme and store), so concurrent writers never
--    wait for each other on a hot counter row; the janitor folds the deltas of a store
--    into one row per lexeme now and then (mneme compaction below).
-- 2. Partial indexes for the self and image searches of Tablet 2, so a search for a
--    store's few "me" memories or images never walks the whole store.
-- 3. Stamping last_used_at on returned memories must not rewrite every index of the
--    row (the HNSW index above all): the transitory index no longer keys on it, and the
--    table keeps room on its pages so that stamp is a HOT update.

CREATE TABLE search_terms (
    workspace_id text    NOT NULL,
    store_id     text    NOT NULL,
    lexeme       text    NOT NULL,
    df           bigint  NOT NULL,
    compacted    boolean NOT NULL DEFAULT false
);
CREATE INDEX search_terms_key ON search_terms (workspace_id, store_id, lexeme);
CREATE INDEX search_terms_fresh ON search_terms (workspace_id, store_id) WHERE NOT compacted;

CREATE TABLE search_store_stats (
    workspace_id text    NOT NULL,
    store_id     text    NOT NULL,
    docs         bigint  NOT NULL,  -- active memories
    length       bigint  NOT NULL,  -- sum of their lexeme counts (BM25 document length)
    self_docs    bigint  NOT NULL,  -- of which speaker 'me'
    image_docs   bigint  NOT NULL,  -- of which images
    compacted    boolean NOT NULL DEFAULT false
);
CREATE INDEX search_store_stats_key ON search_store_stats (workspace_id, store_id);

-- Deltas: a memory leaving the counted set (active memories) counts -1, one entering
-- it +1. Inserts and deletes are counted per statement (a bulk import is one pass); an
-- update only when it changes what is counted, so the worker's vectors and
-- last_used_at stamps cost nothing here.
CREATE FUNCTION mneme_search_stats_apply(
    ws text[], store text[], tsv tsvector[], is_self boolean[], is_image boolean[], sign int[]
) RETURNS void LANGUAGE sql AS $fn$
WITH moved AS MATERIALIZED (
    SELECT * FROM unnest(ws, store, tsv, is_self, is_image, sign)
        AS m(workspace_id, store_id, search_tsv, is_self, is_image, sign)
), terms AS (
    INSERT INTO search_terms (workspace_id, store_id, lexeme, df)
    SELECT workspace_id, store_id, lexeme, sum(sign)
    FROM moved, unnest(tsvector_to_array(search_tsv)) AS lexeme
    GROUP BY workspace_id, store_id, lexeme
    HAVING sum(sign) <> 0
)
INSERT INTO search_store_stats (workspace_id, store_id, docs, length, self_docs, image_docs)
SELECT workspace_id, store_id, sum(sign), sum(sign * length(search_tsv)),
       coalesce(sum(sign) FILTER (WHERE is_self), 0),
       coalesce(sum(sign) FILTER (WHERE is_image), 0)
FROM moved
GROUP BY workspace_id, store_id
HAVING sum(sign) <> 0 OR sum(sign * length(search_tsv)) <> 0
$fn$;

CREATE FUNCTION mneme_search_stats_inserted() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM mneme_search_stats_apply(
        array_agg(workspace_id), array_agg(store_id), array_agg(search_tsv),
        array_agg(speaker IS NOT DISTINCT FROM 'me'), array_agg(kind = 'image'), array_agg(1))
    FROM new_rows WHERE status = 'active' HAVING count(*) > 0;
    RETURN NULL;
END
$fn$;

CREATE FUNCTION mneme_search_stats_deleted() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM mneme_search_stats_apply(
        array_agg(workspace_id), array_agg(store_id), array_agg(search_tsv),
        array_agg(speaker IS NOT DISTINCT FROM 'me'), array_agg(kind = 'image'), array_agg(-1))
    FROM old_rows WHERE status = 'active' HAVING count(*) > 0;
    RETURN NULL;
END
$fn$;

CREATE FUNCTION mneme_search_stats_updated() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM mneme_search_stats_apply(
        array_agg(workspace_id), array_agg(store_id), array_agg(search_tsv),
        array_agg(is_self), array_agg(is_image), array_agg(sign))
    FROM (VALUES
        (OLD.workspace_id, OLD.store_id, OLD.search_tsv, OLD.speaker IS NOT DISTINCT FROM 'me',
         OLD.kind = 'image', -1, OLD.status = 'active'),
        (NEW.workspace_id, NEW.store_id, NEW.search_tsv, NEW.speaker IS NOT DISTINCT FROM 'me',
         NEW.kind = 'image', 1, NEW.status = 'active')
    ) AS x(workspace_id, store_id, search_tsv, is_self, is_image, sign, counted)
    WHERE counted HAVING count(*) > 0;
    RETURN NULL;
END
$fn$;

CREATE TRIGGER memories_search_stats_insert AFTER INSERT ON memories
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION mneme_search_stats_inserted();
CREATE TRIGGER memories_search_stats_delete AFTER DELETE ON memories
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION mneme_search_stats_deleted();
CREATE TRIGGER memories_search_stats_update AFTER UPDATE ON memories
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.store_id IS DISTINCT FROM NEW.store_id
          OR OLD.search_tsv IS DISTINCT FROM NEW.search_tsv
          OR OLD.speaker IS DISTINCT FROM NEW.speaker OR OLD.kind IS DISTINCT FROM NEW.kind)
    EXECUTE FUNCTION mneme_search_stats_updated();

-- What the memories already hold (an upgrade of a database with data).
INSERT INTO search_terms (workspace_id, store_id, lexeme, df, compacted)
SELECT workspace_id, store_id, lexeme, count(*), true
FROM memories, unnest(tsvector_to_array(search_tsv)) AS lexeme
WHERE status = 'active'
GROUP BY workspace_id, store_id, lexeme;
INSERT INTO search_store_stats
    (workspace_id, store_id, docs, length, self_docs, image_docs, compacted)
SELECT workspace_id, store_id, count(*), sum(length(search_tsv)),
       count(*) FILTER (WHERE speaker = 'me'), count(*) FILTER (WHERE kind = 'image'), true
FROM memories
WHERE status = 'active'
GROUP BY workspace_id, store_id;

-- Tablet 2's self_memories and images searches.
CREATE INDEX memories_self ON memories (workspace_id, store_id)
    WHERE speaker = 'me' AND status = 'active';
CREATE INDEX memories_images ON memories (workspace_id, store_id)
    WHERE kind = 'image' AND status = 'active';

-- last_used_at, stamped by every search, must not be a key of any index.
DROP INDEX memories_transitory;
CREATE INDEX memories_transitory ON memories (workspace_id)
    WHERE status = 'active' AND transitory;
ALTER TABLE memories SET (fillfactor = 90);

-- Vectors stay in the row: an exact scan of a small store, and every cosine the search
-- reports, would otherwise fetch each 1.5 kB vector from the TOAST table (measured: 6.8k
-- buffer reads instead of ~1k for a 1,000-memory store). Rows written from now on.
ALTER TABLE memories ALTER COLUMN embedding SET STORAGE PLAIN;
ALTER TABLE memory_chunks ALTER COLUMN embedding SET STORAGE PLAIN;
