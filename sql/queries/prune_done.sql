-- prune_done: delete up to $2 done events published more than $1 seconds ago.
-- $1: retention in seconds; $2: limit.
-- Ids are UUIDv7, so the rows created before the cutoff are a range of the
-- primary key, scanned from the oldest: no index on published_at is needed
-- and the scan stops after $2 rows. published_at decides; the id bound
-- only narrows the scan (a row is published after it is created).
-- SKIP LOCKED lets several replicas prune at once without waiting.
WITH old AS MATERIALIZED (
    SELECT id
      FROM /*schema*/events
     WHERE id < /*schema*/uuid_v7_floor(now() - make_interval(secs => $1))
       AND status = 'done'
       AND published_at < now() - make_interval(secs => $1)
     ORDER BY id
     LIMIT $2
       FOR UPDATE SKIP LOCKED
)
DELETE FROM /*schema*/events AS e
 USING old
 WHERE e.id = old.id
