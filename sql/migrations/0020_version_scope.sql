-- A version keeps the scope its memory had when it was written, and a change of scope is
-- a version of its own: the audit trail says who widened or narrowed a memory, and a
-- version's text (GET …/versions?include=text) is shown only to a key that could read it
-- in that scope (SPEC §9: text written between alice and the bot stays theirs after the
-- memory is moved to the workspace with other words). Rows made before this migration
-- have none and count as in their memory's scope of the day they are read.
ALTER TABLE memory_versions ADD COLUMN scope text;
