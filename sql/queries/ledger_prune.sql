-- ledger_prune: delete up to $2 ledger rows finished more than $1 seconds ago.
-- $1: retention in seconds; $2: limit; $3: the event id this pass's last
-- batch reached (uuid), or NULL for a pass's first. Returns deleted and
-- last_id (the highest event id this batch took from the key range; NULL:
-- none).
-- Finished means done (finished_at), or dead-lettered (dead_at): the
-- dead_letters row is the lasting record of a dead one. Event ids are
-- UUIDv7, so the rows of events created before the cutoff are a range of
-- the primary key, scanned from the oldest: no index on finished_at (which
-- would cost every mark-done a non-HOT update) and the scan stops after $2
-- rows. SKIP LOCKED lets several replicas prune at once without waiting.
-- A pass's batches go on from where the one before stopped ($3; >= keeps
-- the other handlers' rows of the event a batch ended on), so the rows a
-- pass keeps at the old end are stepped over once a pass, not once a batch.
-- Once the key range has no more to give, the batch fills from the rows
-- whose event id is not in that range (not a UUIDv7, or one stamped in the
-- future), through processed_events_off_key_order_idx (0009) in started_at
-- order: a row finishes after it starts, so the scan stops at the first row
-- started too recently to be due. The Append runs its second arm only when
-- the first ran dry, and the outer LIMIT keeps the batch at $2.
-- Ordered schemas (0017): handler_progress is never pruned (it is the
-- order's memory); a parked copy of a pruned row (the handler finished the
-- event but the sweep's ack was lost) goes with it, so it can never run
-- again once the ledger has forgotten it ran. So does the order a claim()
-- of the SQL API kept for its complete() (claim_orders, 0018), if the
-- claimer never came back.
WITH old AS MATERIALIZED (
    SELECT o.event_id, o.handler, o.in_key_range
      FROM (SELECT * FROM (SELECT event_id, handler, true AS in_key_range
               FROM /*schema*/processed_events
              WHERE event_id < /*schema*/uuid_v7_floor(now() - make_interval(secs => $1::double precision))
                AND event_id >= coalesce($3::uuid, '00000000-0000-0000-0000-000000000000')
                AND ((status = 'done'
                      AND finished_at < now() - make_interval(secs => $1::double precision))
                     OR dead_at < now() - make_interval(secs => $1::double precision))
              ORDER BY event_id
              LIMIT $2::integer
                FOR UPDATE SKIP LOCKED) AS in_range
            UNION ALL
            SELECT * FROM (SELECT event_id, handler, false
               FROM /*schema*/processed_events
              WHERE /*schema*/uuid_v7_after(event_id, started_at)
                AND started_at < now() - make_interval(secs => $1::double precision)
                -- A row of the key range is the first arm's, at its place.
                AND event_id >= /*schema*/uuid_v7_floor(now() - make_interval(secs => $1::double precision))
                AND ((status = 'done'
                      AND finished_at < now() - make_interval(secs => $1::double precision))
                     OR dead_at < now() - make_interval(secs => $1::double precision))
              ORDER BY started_at
              LIMIT $2::integer
                FOR UPDATE SKIP LOCKED) AS off_range) AS o
     LIMIT $2::integer
), gone AS (
    DELETE FROM /*schema*/processed_events AS p
     USING old
     WHERE p.event_id = old.event_id AND p.handler = old.handler
    RETURNING p.event_id, p.handler
), parked_gone AS (
    DELETE FROM /*schema*/parked_events AS pe
     USING gone
     WHERE pe.event_id = gone.event_id AND pe.handler = gone.handler
), orders_gone AS (
    DELETE FROM /*schema*/claim_orders AS k
     USING gone
     WHERE k.event_id = gone.event_id AND k.handler = gone.handler
)
-- uuid_out is fixed-width lower-case hex, so text order is uuid order.
SELECT (SELECT count(*) FROM gone) AS deleted,
       (SELECT max(event_id::text) FROM old WHERE in_key_range) AS last_id
