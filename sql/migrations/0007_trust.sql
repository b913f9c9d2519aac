-- Trust: what leaves the service passes the caller's readability, and what every write
-- must do happens in the database.
--
-- 1. Search cache entries belong to a reader. An answer computed for one key holds only
--    what that key may read; another key with the same options must not be served it.
--    `reader` is the caller's visibility (service.queries.keys.Principal.visibility):
--    'service', or the member and its rooms. Two keys with the same visibility read
--    exactly the same memories, so they may share entries.
-- 2. Idempotency records belong to the API key that made them (as Stripe scopes them
--    per account key): another key replaying the same Idempotency-Key is a new request,
--    checked like one.
-- 3. Every change to a store's memories stamps the store's version (the search cache is
--    valid only at the version it was computed at) and wakes the embedding workers when
--    something is waiting to be embedded. Triggers do it, so no write path can forget:
--    before this, eight call sites each had to remember to do it.

-- 1 ---------------------------------------------------------------------------------------
DELETE FROM search_cache;  -- entries of unknown readers: a cache, recomputed on demand
ALTER TABLE search_cache ADD COLUMN reader text NOT NULL;
ALTER TABLE search_cache DROP CONSTRAINT search_cache_pkey;
ALTER TABLE search_cache
    ADD PRIMARY KEY (workspace_id, store_id, model, options_sha256, reader);

-- 2 ---------------------------------------------------------------------------------------
-- Records made before this cannot be attributed to a key; a retry of one of them within
-- its 24 hours is treated as a new request.
DELETE FROM idempotency_keys;
ALTER TABLE idempotency_keys ADD COLUMN api_key_id text NOT NULL;
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey;
ALTER TABLE idempotency_keys ADD PRIMARY KEY (workspace_id, api_key_id, key);

-- 3 ---------------------------------------------------------------------------------------
-- The version a change stamps on its store: the id of the writing transaction. It is
-- unique for all time (a version never repeats, so a cache entry can never match a later
-- state by accident), and a transaction that writes many rows of a store updates the
-- store's row once (the `version <>` guard), however many rows it writes.
CREATE FUNCTION mneme_write_version() RETURNS bigint
LANGUAGE sql VOLATILE
AS $$ SELECT pg_current_xact_id()::text::bigint $$;

CREATE FUNCTION mneme_stores_changed(ws text[], store text[], wake boolean) RETURNS void
LANGUAGE plpgsql
AS $fn$
BEGIN
    UPDATE stores s SET version = mneme_write_version()
    FROM (SELECT DISTINCT w, st FROM unnest(ws, store) AS x(w, st)) changed
    WHERE s.workspace_id = changed.w AND s.id = changed.st
      AND s.version <> mneme_write_version();
    IF wake THEN
        -- Delivered at commit; identical notifications of one transaction fold into one.
        PERFORM pg_notify('mneme_embed', '');
    END IF;
END
$fn$;

-- Inserts and deletes: once per statement (a batch of 500 is one call).
CREATE FUNCTION mneme_memories_inserted() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM mneme_stores_changed(array_agg(workspace_id), array_agg(store_id),
                                 bool_or(embedding_status = 'pending'))
    FROM new_rows HAVING count(*) > 0;
    RETURN NULL;
END
$fn$;

CREATE FUNCTION mneme_memories_deleted() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM mneme_stores_changed(array_agg(workspace_id), array_agg(store_id), false)
    FROM old_rows HAVING count(*) > 0;
    RETURN NULL;
END
$fn$;

-- Updates: per row, and only when something a reader sees changed. The embedding
-- worker's own updates (vector, status, lease, attempts, token count) pass none of the
-- WHEN below, so they neither stamp the store nor wake the workers again. A row
-- trigger: a statement trigger would need transition tables, which would copy every
-- row the worker updates (vector included) into a tuplestore.
CREATE FUNCTION mneme_memory_updated() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM mneme_stores_changed(ARRAY[OLD.workspace_id, NEW.workspace_id],
                                 ARRAY[OLD.store_id, NEW.store_id],
                                 NEW.embedding_status = 'pending');
    RETURN NULL;
END
$fn$;

CREATE TRIGGER memories_changed_insert AFTER INSERT ON memories
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION mneme_memories_inserted();
CREATE TRIGGER memories_changed_delete AFTER DELETE ON memories
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION mneme_memories_deleted();
-- Every column but the worker's and the bookkeeping ones (id, workspace_id, created_at,
-- updated_at, search_tsv: generated from text). tests/test_trust.py holds this list to
-- the table's columns, so a new column cannot be forgotten here.
CREATE TRIGGER memories_changed_update AFTER UPDATE ON memories
    FOR EACH ROW
    WHEN ((OLD.store_id, OLD.kind, OLD.text, OLD.media, OLD.media_type, OLD.scope, OLD.tier,
           OLD.fact_type, OLD.status, OLD.provider, OLD.provider_ref, OLD.entity_refs,
           OLD.proof_count, OLD.category, OLD.importance, OLD.speaker, OLD.event_date,
           OLD.superseded_by, OLD.path, OLD.metadata, OLD.content_sha256,
           OLD.content_size_bytes, OLD.expires_at, OLD.transitory, OLD.first_seen_at,
           OLD.last_used_at)
          IS DISTINCT FROM
          (NEW.store_id, NEW.kind, NEW.text, NEW.media, NEW.media_type, NEW.scope, NEW.tier,
           NEW.fact_type, NEW.status, NEW.provider, NEW.provider_ref, NEW.entity_refs,
           NEW.proof_count, NEW.category, NEW.importance, NEW.speaker, NEW.event_date,
           NEW.superseded_by, NEW.path, NEW.metadata, NEW.content_sha256,
           NEW.content_size_bytes, NEW.expires_at, NEW.transitory, NEW.first_seen_at,
           NEW.last_used_at))
    EXECUTE FUNCTION mneme_memory_updated();
