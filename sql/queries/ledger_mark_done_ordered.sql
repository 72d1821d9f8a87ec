-- ledger_mark_done_ordered: ledger_mark_done.sql for a batch with ordered
-- events, and each aggregate's progress for the handler moved on to the
-- highest number marked done, in the same statement (so in the same
-- transaction as the done mark: migration 0017). A missing progress row
-- (an aggregate's first event: the claim makes none since 0031) is made at
-- that number; the rows are written in key order, as every writer of them
-- takes them, so two done marks queue instead of deadlocking.
-- $1: handler; $2: event ids (uuid[]); $3: their owner tokens (uuid[]);
-- $4, $5, $6: their aggregate_type (text[]), aggregate_id (uuid[]) and
-- aggregate_seq (bigint[]; NULL: unordered), same order.
-- Returns marked: how many rows were marked done.
WITH done AS (
    -- As ledger_mark_done.sql: each claim found by its key, updated by its
    -- row address, whatever the table's size and statistics.
    UPDATE /*schema*/processed_events AS p
       SET status = 'done', finished_at = now(), owner_token = NULL, claimed_until = NULL
     WHERE p.ctid = ANY (ARRAY(
               SELECT (SELECT q.ctid
                         FROM /*schema*/processed_events AS q
                        WHERE q.event_id = c.event_id AND q.handler = $1::text
                          AND q.owner_token = c.owner_token AND q.status = 'in_progress')
                 FROM unnest($2::uuid[], $3::uuid[]) AS c(event_id, owner_token)))
    RETURNING p.event_id
), moved AS (
    INSERT INTO /*schema*/handler_progress AS g (handler, aggregate_type, aggregate_id, last_seq)
    SELECT $1::text, o.aggregate_type, o.aggregate_id, max(o.aggregate_seq)
      FROM unnest($2::uuid[], $4::text[], $5::uuid[], $6::bigint[])
           AS o(event_id, aggregate_type, aggregate_id, aggregate_seq)
      JOIN done AS d ON d.event_id = o.event_id
     WHERE o.aggregate_seq IS NOT NULL
     GROUP BY o.aggregate_type, o.aggregate_id
     ORDER BY o.aggregate_type, o.aggregate_id
        ON CONFLICT (handler, aggregate_type, aggregate_id) DO UPDATE
       SET last_seq = excluded.last_seq, updated_at = now()
     WHERE g.last_seq < excluded.last_seq
)
SELECT count(*) AS marked FROM done
