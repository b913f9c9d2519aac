-- A store's version moves to a table of its own, without a foreign key.
--
-- Kept on the store's row (0007), stamping it deadlocked with deleting the store (found
-- by fuzzing): a writer holds a key-share lock on the store's row (its memory's foreign
-- key) until commit, when it needs to update that row; a deleter queued for the row
-- holds the tuple lock the writer then waits behind. A row here is stamped without ever
-- touching the store's; a deleted store's row is left for the janitor
-- (service.queries.stores.prune_versions). A store with no row is at version 0.
CREATE TABLE store_versions (
    workspace_id text   NOT NULL,
    store_id     text   NOT NULL,
    version      bigint NOT NULL,
    PRIMARY KEY (workspace_id, store_id)
);
INSERT INTO store_versions (workspace_id, store_id, version)
SELECT workspace_id, id, version FROM stores WHERE version <> 0;
ALTER TABLE stores DROP COLUMN version;

-- Stamps a store with the writing transaction's id (mneme_write_version, 0007); a
-- transaction that writes many rows of a store updates its version once (the `<>`
-- guard), however many rows it writes.
CREATE FUNCTION mneme_stamp_store(ws text, store text) RETURNS void
LANGUAGE sql VOLATILE
AS $$
    INSERT INTO store_versions AS v (workspace_id, store_id, version)
    VALUES (ws, store, mneme_write_version())
    ON CONFLICT (workspace_id, store_id) DO UPDATE SET version = excluded.version
    WHERE v.version <> excluded.version
$$;

-- The same rule as 0007's (at commit, for each changed memory: stamp its store, wake the
-- workers if it waits for a vector), stamping the new table.
CREATE OR REPLACE FUNCTION mneme_memory_changed() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        PERFORM mneme_stamp_store(OLD.workspace_id, OLD.store_id);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM mneme_stamp_store(NEW.workspace_id, NEW.store_id);
        IF NEW.embedding_status = 'pending' THEN
            PERFORM pg_notify('mneme_embed', '');
        END IF;
    END IF;
    RETURN NULL;
END
$fn$;

-- A change to the store itself (its name, strip_temporal) changes its answers too: the
-- store face's update stamped it by hand before; a trigger cannot be forgotten.
CREATE FUNCTION mneme_store_updated() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM mneme_stamp_store(NEW.workspace_id, NEW.id);
    RETURN NULL;
END
$fn$;

CREATE CONSTRAINT TRIGGER stores_changed AFTER UPDATE ON stores
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD IS DISTINCT FROM NEW)
    EXECUTE FUNCTION mneme_store_updated();
