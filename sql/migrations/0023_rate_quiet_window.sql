-- The sliding-window estimate weighs the previous minute's count by its overlap with the
-- last 60 seconds, as if its requests were spread evenly; a burst early in that minute
-- then refused a workspace that had sent nothing for the last 60 seconds (issue 48).
-- Each minute's row now keeps the time of its last counted request: a previous minute
-- whose last request is 60 seconds old or older weighs nothing. So a workspace with no
-- request in the window is never refused, and a client that waits 60 seconds is let
-- through: Retry-After is at most 60 (service.queries.ratelimit).
ALTER TABLE rate_limit_counters ADD COLUMN last_at timestamptz;

CREATE OR REPLACE FUNCTION mneme_rate_hit(ws text, per_minute integer)
RETURNS TABLE (allowed boolean, current_count integer, previous_count integer,
               elapsed_fraction float8)
LANGUAGE sql VOLATILE
AS $$
    WITH w AS (
        SELECT date_trunc('minute', now()) AS start,
               extract(epoch FROM now() - date_trunc('minute', now()))::float8 / 60.0 AS elapsed
    ), prev AS (
        SELECT coalesce((SELECT c.count FROM rate_limit_counters c, w
                         WHERE c.workspace_id = ws
                           AND c.window_start = w.start - interval '1 minute'
                           AND (c.last_at IS NULL OR c.last_at > now() - interval '1 minute')),
                        0) AS count
    ), hit AS (
        INSERT INTO rate_limit_counters AS c (workspace_id, window_start, count, last_at)
        SELECT ws, w.start, 1, now() FROM w, prev WHERE prev.count * (1 - w.elapsed) + 1 <= per_minute
        ON CONFLICT (workspace_id, window_start) DO UPDATE
            SET count = c.count + 1, last_at = now()
            WHERE c.count + 1 + (SELECT prev.count * (1 - w.elapsed) FROM w, prev) <= per_minute
        RETURNING c.count
    )
    SELECT (SELECT count FROM hit) IS NOT NULL,
           coalesce((SELECT c.count FROM rate_limit_counters c, w
                     WHERE c.workspace_id = ws AND c.window_start = w.start), 0),
           prev.count,
           w.elapsed
    FROM w, prev
$$;
