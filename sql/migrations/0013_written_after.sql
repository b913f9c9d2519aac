-- Each memory's neighbour in write order, fixed when it is written: the memory written
-- right before it in its store and scope (whoever may read one may read the other:
-- readability depends on the scope alone). Search lets a strong hit lend part of its
-- score to the memories written right before and after it (service.ranking); with the
-- link in the row, both come with the candidates themselves: no statement, no probe at
-- search time (a probe per lender cost a search ~1 ms).
--
-- Fixed at write time: a neighbour deleted later stays the link (a deleted memory is
-- never a candidate, so it lends and borrows nothing), and a memory moved to another
-- scope keeps its links (lending only happens between two candidates, both readable by
-- the caller).
ALTER TABLE memories ADD COLUMN written_after text;

CREATE INDEX memories_scope_window ON memories (workspace_id, store_id, scope, created_at DESC, id DESC);

UPDATE memories m SET written_after = o.before
FROM (
    SELECT workspace_id, id,
           lag(id) OVER (PARTITION BY workspace_id, store_id, scope ORDER BY created_at, id) AS before
    FROM memories
) o
WHERE o.workspace_id = m.workspace_id AND o.id = m.id AND o.before IS NOT NULL;

-- BEFORE INSERT: a row of a batch sees the rows the same statement inserted before it.
CREATE FUNCTION mneme_written_after() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    NEW.written_after := (
        SELECT n.id FROM memories n
        WHERE n.workspace_id = NEW.workspace_id AND n.store_id = NEW.store_id
          AND n.scope = NEW.scope AND (n.created_at, n.id) < (NEW.created_at, NEW.id)
        ORDER BY n.created_at DESC, n.id DESC
        LIMIT 1
    );
    RETURN NEW;
END
$fn$;

CREATE TRIGGER memories_written_after BEFORE INSERT ON memories
    FOR EACH ROW EXECUTE FUNCTION mneme_written_after();
