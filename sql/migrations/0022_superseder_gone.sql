-- A memory superseded by one that is then deleted (tombstoned) or purged is current
-- again (issue 48): its link to the gone memory is cleared here, in the database, so
-- that every path that removes a memory does it (DELETE, a PATCH of status, a purge, a
-- store's deletion, an erasure) without remembering to. A memory names one superseder
-- (superseded_by), so once that one is gone no other live memory supersedes it.
-- Restoring a tombstoned memory does not link it again: a write with `supersedes` does.
CREATE FUNCTION mneme_unsupersede_tombstoned() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    UPDATE memories SET superseded_by = NULL, updated_at = now()
    WHERE workspace_id = NEW.workspace_id AND superseded_by = NEW.id;
    RETURN NULL;
END
$fn$;

CREATE TRIGGER memories_unsupersede_tombstoned AFTER UPDATE OF status ON memories
    FOR EACH ROW WHEN (NEW.status = 'deleted' AND OLD.status <> 'deleted')
    EXECUTE FUNCTION mneme_unsupersede_tombstoned();

-- Per statement, from the rows it deleted: a store's deletion (a cascade) or an erasure
-- removes many at once, and each probe is one look into memories_superseded_by (0019).
CREATE FUNCTION mneme_unsupersede_purged() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    UPDATE memories m SET superseded_by = NULL, updated_at = now()
    FROM gone g
    WHERE m.workspace_id = g.workspace_id AND m.superseded_by = g.id;
    RETURN NULL;
END
$fn$;

CREATE TRIGGER memories_unsupersede_purged AFTER DELETE ON memories
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION mneme_unsupersede_purged();
