-- ledger_prune: delete up to $2 ledger rows finished more than $1 seconds ago.
-- $1: retention in seconds; $2: limit; $3: the event id this pass's last
-- batch reached (uuid), or NULL for a pass's first. Returns deleted and
-- last_id (the highest event id this batch took; NULL: none).
-- Finished means done (finished_at), or dead-lettered (dead_at): the
-- dead_letters row is the lasting record of a dead one. Event ids are
-- UUIDv7, so the rows of events created before the cutoff are a range of
-- the primary key, scanned from the oldest: no index on finished_at (which
-- would cost every mark-done a non-HOT update) and the scan stops after $2
-- rows. SKIP LOCKED lets several replicas prune at once without waiting.
-- A pass's batches go on from where the one before stopped ($3; >= keeps
-- the other handlers' rows of the event a batch ended on), so the rows a
-- pass keeps at the old end are stepped over once a pass, not once a batch.
WITH old AS MATERIALIZED (
    SELECT event_id, handler
      FROM /*schema*/processed_events
     WHERE event_id < /*schema*/uuid_v7_floor(now() - make_interval(secs => $1::double precision))
       AND event_id >= coalesce($3::uuid, '00000000-0000-0000-0000-000000000000')
       AND ((status = 'done'
             AND finished_at < now() - make_interval(secs => $1::double precision))
            OR dead_at < now() - make_interval(secs => $1::double precision))
     ORDER BY event_id
     LIMIT $2::integer
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM /*schema*/processed_events AS p
     USING old
     WHERE p.event_id = old.event_id AND p.handler = old.handler
    RETURNING p.event_id
)
-- uuid_out is fixed-width lower-case hex, so text order is uuid order.
SELECT (SELECT count(*) FROM gone) AS deleted, (SELECT max(event_id::text) FROM old) AS last_id
