-- The advisory-lock key of a write's identity, defined once, in the database.
--
-- Two writes that would decide the same identity (a sync identity: workspace, store,
-- provider, providerRef; or, for the duplicate rule, workspace, store, '' and the text's
-- sha256) are serialised until commit by a transaction-level advisory lock on this key
-- (service.writes.identity_of names the parts). It was hashed in Python; a write made in
-- one statement (service.single) resolves its store in SQL, so the hash lives here and
-- every path, one statement or many, takes the same lock. The first 8 bytes of the
-- sha256 of the parts joined by U+001F, as a signed bigint: the value Python computed, so
-- instances on either side of this migration still lock each other out.
CREATE FUNCTION mneme_identity_key(ws text, store text, provider text, ref text)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT ('x' || encode(substr(sha256(convert_to(
        ws || E'\x1f' || store || E'\x1f' || provider || E'\x1f' || ref, 'UTF8')), 1, 8),
        'hex'))::bit(64)::bigint
$$;
