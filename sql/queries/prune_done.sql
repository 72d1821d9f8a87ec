-- prune_done: delete up to $2 done events published more than $1 seconds ago.
-- $1: retention in seconds; $2: limit; $3: the id this pass's last batch
-- reached (uuid), or NULL for a pass's first. Returns deleted, the rows
-- gone, and last_id, the highest id this batch took from the key range
-- (NULL: none).
-- Ids are UUIDv7, so the rows created before the cutoff are a range of the
-- primary key, scanned from the oldest: no index on published_at is needed
-- and the scan stops after $2 rows. published_at decides; the id bound
-- only narrows the scan (a row is published after it is created).
-- SKIP LOCKED lets several replicas prune at once without waiting.
-- A pass's batches go on from where the one before stopped ($3), so the
-- rows a pass keeps at the old end (dead and invalid rows wait there for
-- an operator, for as long as it takes) are stepped over once a pass, not
-- once a batch: 100,000 of them cost 20 x 100,000 row visits a pass before.
-- Once the key range has no more to give, the batch fills from the rows
-- whose id is not in that range (a foreign writer's gen_random_uuid(), a
-- v7 stamped in the future), through events_off_key_order_idx (0013) in
-- created_at order: it stops at the first row created after the cutoff,
-- stepping over the few created before it and published since. The Append
-- runs its second arm only when the first ran dry, and the outer LIMIT
-- keeps the batch at $2.
WITH old AS MATERIALIZED (
    SELECT o.id, o.in_key_range
      FROM (SELECT * FROM (SELECT id, true AS in_key_range
               FROM /*schema*/events
              WHERE id < /*schema*/uuid_v7_floor(now() - make_interval(secs => $1))
                AND id >= coalesce($3::uuid, '00000000-0000-0000-0000-000000000000')
                AND status = 'done'
                AND published_at < now() - make_interval(secs => $1)
              ORDER BY id
              LIMIT $2
                FOR UPDATE SKIP LOCKED) AS in_range
            UNION ALL
            SELECT * FROM (SELECT id, false
               FROM /*schema*/events
              WHERE /*schema*/uuid_v7_after(id, created_at)
                -- Created before published: the index's bound.
                AND created_at < now() - make_interval(secs => $1)
                AND published_at < now() - make_interval(secs => $1)
                -- A row of the key range is the first arm's, at its place.
                AND id >= /*schema*/uuid_v7_floor(now() - make_interval(secs => $1))
                AND status = 'done'
              ORDER BY created_at
              LIMIT $2
                FOR UPDATE SKIP LOCKED) AS off_range) AS o
     LIMIT $2
), gone AS (
    DELETE FROM /*schema*/events AS e
     USING old
     WHERE e.id = old.id
    RETURNING e.id
)
-- uuid_out is fixed-width lower-case hex, so text order is uuid order.
SELECT (SELECT count(*) FROM gone) AS deleted,
       (SELECT max(id::text) FROM old WHERE in_key_range) AS last_id
