-- How many tokens a memory's text is, as search bills it (SPEC §3.3: units count the
-- tokens of the results delivered). The embedding worker fills it with the vector; a
-- write that changes the text clears it. Search counts what is still NULL itself:
-- counting every result of every search took ~3 ms of a ~40 ms search (measured,
-- 20 results), on the event loop.
ALTER TABLE memories ADD COLUMN text_tokens integer;
