-- Registering or removing a speaker changes a store's answers: a question that names a
-- registered speaker favours their memories (service.retrieval.ranking.named_speaker).
-- So it stamps the store's version as a memory's change does, which invalidates the
-- store's cached answers and snapshot at once, whatever door made the change.
CREATE FUNCTION mneme_speaker_changed() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM mneme_stamp_store(OLD.workspace_id, OLD.store_id);
    ELSE
        PERFORM mneme_stamp_store(NEW.workspace_id, NEW.store_id);
    END IF;
    RETURN NULL;
END
$fn$;

CREATE CONSTRAINT TRIGGER speakers_changed AFTER INSERT OR UPDATE OR DELETE ON speakers
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    EXECUTE FUNCTION mneme_speaker_changed();
