-- Bounds on what anyone can add through OAuth client registration, which needs no key
-- (issue 59): registrations are counted per client address and clock hour, and a client
-- that never got a grant is pruned a day after it registered (the janitor).

-- Registrations per address (an IPv6 one's /64) in each clock hour. The check and the
-- count are one upsert, whose row lock serialises every process on this database.
CREATE TABLE oauth_registration_counts (
    address      text        NOT NULL,
    window_start timestamptz NOT NULL,
    count        integer     NOT NULL,
    PRIMARY KEY (address, window_start)
);

-- The janitor looks for old clients, then for a grant or a live request of each.
CREATE INDEX oauth_clients_created ON oauth_clients (created_at);
CREATE INDEX oauth_grants_client ON oauth_grants (client_id);
CREATE INDEX oauth_requests_client ON oauth_requests (client_id);
