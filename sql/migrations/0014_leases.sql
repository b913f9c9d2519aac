-- Work that one instance at a time should do, among any number of `mneme serve` replicas
-- on one database (the janitor: pruning, statistics compaction, retention). A lease is a
-- row, not a session advisory lock, so it holds through PgBouncer in transaction mode and
-- across the pass's own transactions: the holder renews it each pass; when the holder
-- stops (or dies), another instance takes it once it has run out.
CREATE TABLE leases (
    name   text        NOT NULL PRIMARY KEY,
    holder text        NOT NULL,
    until  timestamptz NOT NULL
);
