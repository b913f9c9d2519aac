-- Trust: what leaves the service passes the caller's readability, and what every write
-- must do happens in the database.
--
-- 1. Search cache entries belong to a reader. An answer computed for one key holds only
--    what that key may read; another key with the same options must not be served it.
--    `reader_sha256` hashes the caller's visibility (Principal.visibility in
--    service/queries/keys.py): 'service', or the member and its rooms (a hash: a member
--    of many rooms would pass the index's size limit). Two keys with the same
--    visibility read exactly the same memories, so they may share entries.
-- 2. Idempotency records belong to the API key that made them (as Stripe scopes them
--    per account key): another key replaying the same Idempotency-Key is a new request,
--    checked like one.
-- 3. Every change to a store's memories stamps the store's version (the search cache is
--    valid only at the version it was computed at) and wakes the embedding workers when
--    something is waiting to be embedded. Triggers do it, so no write path can forget:
--    before this, eight call sites each had to remember to do it.

-- 1 ---------------------------------------------------------------------------------------
DELETE FROM search_cache;  -- entries of unknown readers: a cache, recomputed on demand
ALTER TABLE search_cache ADD COLUMN reader_sha256 bytea NOT NULL;
ALTER TABLE search_cache DROP CONSTRAINT search_cache_pkey;
ALTER TABLE search_cache
    ADD PRIMARY KEY (workspace_id, store_id, model, options_sha256, reader_sha256);

-- 2 ---------------------------------------------------------------------------------------
-- Records made before this cannot be attributed to a key: they are dropped, so a retry
-- that crosses the upgrade is a new request (README: upgrading).
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

-- For each changed row, at commit: stamp its store, and wake the workers if the row now
-- waits for a vector (NOTIFY is delivered when the transaction commits; identical
-- notifications of one transaction fold into one).
--
-- Deferred to commit (constraint triggers, INITIALLY DEFERRED), so a store's row is
-- locked only while a writer commits, as the explicit stamp before commit used to be: a
-- stamp taken at the first write would hold the row for the whole transaction, and a
-- writer waiting for it while holding a lock the first one needs next (the advisory lock
-- of a duplicate text, a memory row being superseded) would deadlock with it.
CREATE FUNCTION mneme_memory_changed() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        UPDATE stores SET version = mneme_write_version()
        WHERE workspace_id = OLD.workspace_id AND id = OLD.store_id
          AND version <> mneme_write_version();
    END IF;
    IF TG_OP <> 'DELETE' THEN
        UPDATE stores SET version = mneme_write_version()
        WHERE workspace_id = NEW.workspace_id AND id = NEW.store_id
          AND version <> mneme_write_version();
        IF NEW.embedding_status = 'pending' THEN
            PERFORM pg_notify('mneme_embed', '');
        END IF;
    END IF;
    RETURN NULL;
END
$fn$;

CREATE CONSTRAINT TRIGGER memories_changed AFTER INSERT OR DELETE ON memories
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION mneme_memory_changed();
-- Updates count when something a search or a reader sees changed: every column but the
-- bookkeeping ones (id, workspace_id, created_at, updated_at, search_tsv: generated from
-- text) and the worker's own claim state (lease, attempts, error, generation, token
-- count). A vector arriving counts (embedding_status): answers rank differently with
-- it, and a vector-only model finds the memory only then; a claim or its renewal does
-- not, so the worker neither stamps the store nor wakes itself for those.
-- tests/test_write_rules.py holds this list to the table's columns, so a new column
-- cannot be forgotten here.
CREATE CONSTRAINT TRIGGER memories_changed_update AFTER UPDATE ON memories
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN ((OLD.store_id, OLD.kind, OLD.text, OLD.media, OLD.media_type, OLD.scope, OLD.tier,
           OLD.fact_type, OLD.status, OLD.provider, OLD.provider_ref, OLD.entity_refs,
           OLD.proof_count, OLD.category, OLD.importance, OLD.speaker, OLD.event_date,
           OLD.superseded_by, OLD.path, OLD.metadata, OLD.content_sha256,
           OLD.content_size_bytes, OLD.expires_at, OLD.transitory, OLD.first_seen_at,
           OLD.last_used_at, OLD.embedding_status)
          IS DISTINCT FROM
          (NEW.store_id, NEW.kind, NEW.text, NEW.media, NEW.media_type, NEW.scope, NEW.tier,
           NEW.fact_type, NEW.status, NEW.provider, NEW.provider_ref, NEW.entity_refs,
           NEW.proof_count, NEW.category, NEW.importance, NEW.speaker, NEW.event_date,
           NEW.superseded_by, NEW.path, NEW.metadata, NEW.content_sha256,
           NEW.content_size_bytes, NEW.expires_at, NEW.transitory, NEW.first_seen_at,
           NEW.last_used_at, NEW.embedding_status))
    EXECUTE FUNCTION mneme_memory_changed();
