-- ledger_prune: delete up to $2 ledger rows finished more than $1 seconds ago.
-- $1: retention in seconds; $2: limit.
-- Finished means done (finished_at), or dead-lettered (dead_at): the
-- dead_letters row is the lasting record of a dead one. Event ids are
-- UUIDv7, so the rows of events created before the cutoff are a range of
-- the primary key, scanned from the oldest: no index on finished_at (which
-- would cost every mark-done a non-HOT update) and the scan stops after $2
-- rows. SKIP LOCKED lets several replicas prune at once without waiting.
WITH old AS MATERIALIZED (
    SELECT event_id, handler
      FROM /*schema*/processed_events
     WHERE event_id < /*schema*/uuid_v7_floor(now() - make_interval(secs => $1::double precision))
       AND ((status = 'done'
             AND finished_at < now() - make_interval(secs => $1::double precision))
            OR dead_at < now() - make_interval(secs => $1::double precision))
     ORDER BY event_id
     LIMIT $2::integer
       FOR UPDATE SKIP LOCKED
)
DELETE FROM /*schema*/processed_events AS p
 USING old
 WHERE p.event_id = old.event_id AND p.handler = old.handler
