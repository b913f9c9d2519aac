-- A store's version covers every column a search reads, text_tokens included.
--
-- Search snapshots (service/snapshots.py) hold a small store's rows as of one version and
-- bill each result's stored token count from them; the count was unwatched as the
-- worker's own state (it arrives with embedding_status, which is watched). Watching it
-- costs nothing for the worker, which writes both in one UPDATE, and a count set any
-- other way is seen at once too.
DROP TRIGGER memories_changed_update ON memories;

CREATE CONSTRAINT TRIGGER memories_changed_update AFTER UPDATE ON memories
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN ((OLD.store_id, OLD.kind, OLD.text, OLD.media, OLD.media_type, OLD.scope, OLD.tier,
           OLD.fact_type, OLD.status, OLD.provider, OLD.provider_ref, OLD.entity_refs,
           OLD.proof_count, OLD.category, OLD.importance, OLD.speaker, OLD.event_date,
           OLD.superseded_by, OLD.path, OLD.metadata, OLD.content_sha256,
           OLD.content_size_bytes, OLD.expires_at, OLD.transitory, OLD.first_seen_at,
           OLD.last_used_at, OLD.embedding_status, OLD.text_tokens)
          IS DISTINCT FROM
          (NEW.store_id, NEW.kind, NEW.text, NEW.media, NEW.media_type, NEW.scope, NEW.tier,
           NEW.fact_type, NEW.status, NEW.provider, NEW.provider_ref, NEW.entity_refs,
           NEW.proof_count, NEW.category, NEW.importance, NEW.speaker, NEW.event_date,
           NEW.superseded_by, NEW.path, NEW.metadata, NEW.content_sha256,
           NEW.content_size_bytes, NEW.expires_at, NEW.transitory, NEW.first_seen_at,
           NEW.last_used_at, NEW.embedding_status, NEW.text_tokens))
    EXECUTE FUNCTION mneme_memory_changed();
