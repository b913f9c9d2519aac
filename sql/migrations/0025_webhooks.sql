-- Webhooks (issue 48): a workspace's endpoints, told when its memories change.
--
-- At least once, never lost: the events are written here, by triggers on memories, in the
-- transaction of the write that causes them (an outbox), and only where a webhook of the
-- workspace asks for them; the dispatcher (service/webhooks/dispatcher.py, on one replica
-- at a time) sends each delivery until its endpoint answers 2xx. An event holds no text:
-- what a delivery carries is the memory as its webhook's key reads it when it is sent.
CREATE TABLE webhooks (
    workspace_id text        NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    id           text        NOT NULL,
    -- The key that made it: a delivery shows only what this key may read, and stops
    -- (failed, "key revoked") once the key is revoked.
    key_id       text        NOT NULL,
    url          text        NOT NULL,
    events       text[]      NOT NULL,
    store_id     text,  -- NULL: every store of the workspace
    secret       text        NOT NULL,  -- signs deliveries: kept to sign, shown once
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, id),
    FOREIGN KEY (workspace_id, key_id) REFERENCES api_keys (workspace_id, id) ON DELETE CASCADE,
    FOREIGN KEY (workspace_id, store_id) REFERENCES stores (workspace_id, id) ON DELETE CASCADE,
    CHECK (events <@ ARRAY['memory.created', 'memory.updated', 'memory.deleted',
                           'memory.embedded'] AND cardinality(events) > 0)
);

CREATE TABLE webhook_events (
    workspace_id text        NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    id           text        NOT NULL,  -- evt_…, in creation order (mneme_event_id)
    type         text        NOT NULL,
    memory_id    text        NOT NULL,
    store_id     text        NOT NULL,
    -- The memory's scope as the event happened: a memory.deleted is sent only to a key
    -- that could read the memory (it is gone, or a tombstone, when the event is sent).
    scope        text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, id)
);

CREATE TABLE webhook_deliveries (
    workspace_id    text        NOT NULL,
    webhook_id      text        NOT NULL,
    event_id        text        NOT NULL,
    -- pending → delivered (a 2xx), failed (24 h of retries, or the key revoked), or
    -- skipped (the key may not read the memory, or it is gone: nothing sent).
    state           text        NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'delivered', 'failed', 'skipped')),
    attempts        int         NOT NULL DEFAULT 0,
    last_status     int,  -- the endpoint's last HTTP status (NULL: no answer)
    last_error      text,  -- why the last attempt was not a delivery, short
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    retry_until     timestamptz NOT NULL DEFAULT now() + interval '24 hours',
    delivered_at    timestamptz,
    finished_at     timestamptz,  -- delivered, failed or skipped: pruned 7 days on
    PRIMARY KEY (workspace_id, webhook_id, event_id),
    FOREIGN KEY (workspace_id, webhook_id) REFERENCES webhooks (workspace_id, id)
        ON DELETE CASCADE,
    FOREIGN KEY (workspace_id, event_id) REFERENCES webhook_events (workspace_id, id)
        ON DELETE CASCADE
);

-- What the dispatcher sends next, and the backlog it reports.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE state = 'pending';
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (finished_at)
    WHERE state <> 'pending';
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (workspace_id, event_id);

-- evt_ + 10 base32 characters of the millisecond time + 10 of 50 random bits: the format
-- of service/ids.py, so event ids sort by creation time as the others do.
CREATE FUNCTION mneme_event_id() RETURNS text LANGUAGE sql VOLATILE AS $fn$
SELECT 'evt_' || string_agg(
    substr('0123456789abcdefghjkmnpqrstvwxyz',
           (((CASE WHEN i < 10 THEN t.ms ELSE t.r END) >> (5 * (9 - i % 10))) & 31)::int + 1,
           1),
    '' ORDER BY i)
FROM (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms,
             (random() * 1125899906842623)::bigint AS r) t,
     generate_series(0, 19) i
$fn$;

-- The events of changed memories, and a delivery of each for every webhook that asks for
-- it (its events, its store). Called by the triggers below, in the writer's transaction.
-- PL/pgSQL: its statement's plan is kept for the session (an SQL function's is made
-- again at every call).
CREATE FUNCTION mneme_webhook_outbox(
    workspaces text[], ids text[], stores text[], scopes text[], types text[]
) RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
    WITH changed AS (
        SELECT * FROM unnest(workspaces, ids, stores, scopes, types)
            AS c(workspace_id, id, store_id, scope, type)
        WHERE EXISTS (
            SELECT 1 FROM webhooks w
            WHERE w.workspace_id = c.workspace_id AND c.type = ANY (w.events)
              AND (w.store_id IS NULL OR w.store_id = c.store_id))
    ), events AS (
        INSERT INTO webhook_events (workspace_id, id, type, memory_id, store_id, scope)
        SELECT workspace_id, mneme_event_id(), type, id, store_id, scope FROM changed
        RETURNING workspace_id, id, type, store_id
    )
    INSERT INTO webhook_deliveries (workspace_id, webhook_id, event_id)
    SELECT e.workspace_id, w.id, e.id
    FROM events e
    JOIN webhooks w ON w.workspace_id = e.workspace_id AND e.type = ANY (w.events)
                   AND (w.store_id IS NULL OR w.store_id = e.store_id);
END
$fn$;

-- Inserts (memory.created) and purges (memory.deleted), per statement (a bulk write, a
-- store's deletion, an erasure): one look at the webhooks table when there are none,
-- whatever the number of rows. A purged tombstone's memory.deleted was sent already.
CREATE FUNCTION mneme_outbox_inserted_or_purged() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF EXISTS (SELECT 1 FROM webhooks) THEN
        PERFORM mneme_webhook_outbox(
            array_agg(workspace_id), array_agg(id), array_agg(store_id), array_agg(scope),
            array_agg(CASE TG_OP WHEN 'INSERT' THEN 'memory.created' ELSE 'memory.deleted' END))
        FROM changed WHERE TG_OP = 'INSERT' OR status <> 'deleted';
    END IF;
    RETURN NULL;
END
$fn$;

CREATE TRIGGER memories_outbox_created AFTER INSERT ON memories
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION mneme_outbox_inserted_or_purged();

CREATE TRIGGER memories_outbox_purged AFTER DELETE ON memories
    REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION mneme_outbox_inserted_or_purged();

-- Updates, per row, and only those a receiver hears of (the WHEN clause: a worker's claim
-- or a search's last-used stamp never calls it): tombstoned → memory.deleted; what a
-- reader sees changed (text, fields, status: archive, restore) → memory.updated; its
-- vector stored → memory.embedded.
CREATE FUNCTION mneme_outbox_updated() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    kind text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhooks WHERE workspace_id = NEW.workspace_id) THEN
        RETURN NULL;
    END IF;
    IF NEW.status = 'deleted' AND OLD.status <> 'deleted' THEN
        kind := 'memory.deleted';
    ELSIF NEW.embedding_status = 'ready' AND OLD.embedding_status <> 'ready' THEN
        kind := 'memory.embedded';
    ELSE
        kind := 'memory.updated';
    END IF;
    PERFORM mneme_webhook_outbox(ARRAY[NEW.workspace_id], ARRAY[NEW.id], ARRAY[NEW.store_id],
                                 ARRAY[OLD.scope], ARRAY[kind]);
    RETURN NULL;
END
$fn$;

CREATE TRIGGER memories_outbox_updated AFTER UPDATE ON memories
    FOR EACH ROW
    WHEN ((NEW.status = 'deleted' AND OLD.status <> 'deleted')
          OR (NEW.embedding_status = 'ready' AND OLD.embedding_status <> 'ready')
          OR ((OLD.store_id, OLD.kind, OLD.text, OLD.media, OLD.media_type, OLD.scope,
               OLD.tier, OLD.fact_type, OLD.status, OLD.provider, OLD.provider_ref,
               OLD.entity_refs, OLD.proof_count, OLD.category, OLD.importance, OLD.speaker,
               OLD.event_date, OLD.superseded_by, OLD.path, OLD.metadata, OLD.expires_at,
               OLD.transitory)
              IS DISTINCT FROM
              (NEW.store_id, NEW.kind, NEW.text, NEW.media, NEW.media_type, NEW.scope,
               NEW.tier, NEW.fact_type, NEW.status, NEW.provider, NEW.provider_ref,
               NEW.entity_refs, NEW.proof_count, NEW.category, NEW.importance, NEW.speaker,
               NEW.event_date, NEW.superseded_by, NEW.path, NEW.metadata, NEW.expires_at,
               NEW.transitory)))
    EXECUTE FUNCTION mneme_outbox_updated();
