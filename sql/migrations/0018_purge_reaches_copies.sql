-- A purge erases a memory "for good" (SPEC §3.1), so it also reaches the copies of it
-- kept elsewhere: an Idempotency-Key's stored answer (replayed for 24 hours) and cached
-- search answers. An idempotency record now lists the memories its answer holds, so a
-- purge finds the records to drop, and a replay can first check that the caller may
-- still read each of them. Records made before this migration list none (a replay of
-- one is not re-checked; they expire within 24 hours).
ALTER TABLE idempotency_keys ADD COLUMN memory_ids text[] NOT NULL DEFAULT '{}';
