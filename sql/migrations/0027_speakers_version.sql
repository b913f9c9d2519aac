-- A version of each store's set of speakers, apart from the store's own version.
--
-- A search matches the speakers a query names with a structure built from the store's
-- speakers (service.retrieval.speaker_names), kept while the set is unchanged. The store's
-- version moves with every memory written, so keying on it would read and rebuild every
-- speaker list after each write; this one moves only when a speaker is registered or
-- removed. 0 until then (the janitor prunes the row with the store's version row).
ALTER TABLE store_versions ADD COLUMN speakers_version bigint NOT NULL DEFAULT 0;

-- Stamps the store's version and its speakers' at once, as mneme_stamp_store does the
-- first (once per transaction: the `IS DISTINCT FROM` guard).
CREATE FUNCTION mneme_stamp_speakers(ws text, store text) RETURNS void
LANGUAGE sql VOLATILE
AS $$
    INSERT INTO store_versions AS v (workspace_id, store_id, version, speakers_version)
    VALUES (ws, store, mneme_write_version(), mneme_write_version())
    ON CONFLICT (workspace_id, store_id) DO UPDATE
    SET version = excluded.version, speakers_version = excluded.speakers_version
    WHERE (v.version, v.speakers_version)
          IS DISTINCT FROM (excluded.version, excluded.speakers_version)
$$;

-- The trigger of 0017, stamping both (NEW is null for a DELETE, OLD for an INSERT).
CREATE OR REPLACE FUNCTION mneme_speaker_changed() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM mneme_stamp_speakers(coalesce(NEW.workspace_id, OLD.workspace_id),
                                 coalesce(NEW.store_id, OLD.store_id));
    RETURN NULL;
END
$fn$;
