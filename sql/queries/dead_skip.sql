-- dead_skip: record the chosen dead letters' events as gaps of their ordered
-- aggregates (aggregate_skips, migration 0015), so the events behind them
-- go on: the relay's dead letter (handler '') for relays and every handler,
-- a handler's for that handler only. $1-$9: the filters (src/outboxctl/cli.h).
-- Dead letters not requeued since they died, of events with a number; one
-- without (an unordered event) is reported and left as it is. The skipped
-- event stays a dead letter, to read or purge, and is never requeued (the
-- events behind it went out first). The relay's rows that waited behind
-- it are due at once. Returns one row per dead letter chosen.
WITH chosen AS MATERIALIZED (
    SELECT d.event_id, d.handler, d.envelope
      FROM /*schema*/dead_letters_matching($1::text, $2::text, $3::text, $4::uuid,
                                           $5::timestamptz, $6::timestamptz, $7::text,
                                           $8::uuid[], $9::bigint, true) AS m
      JOIN /*schema*/dead_letters AS d USING (event_id, handler)
       FOR UPDATE OF d
), numbered AS MATERIALIZED (
    SELECT c.event_id, c.handler,
           coalesce(e.aggregate_type, c.envelope ->> 'aggregate_type') AS aggregate_type,
           coalesce(e.aggregate_id, (c.envelope ->> 'aggregate_id')::uuid) AS aggregate_id,
           coalesce(e.aggregate_seq, (c.envelope ->> 'aggregate_seq')::bigint) AS aggregate_seq
      FROM chosen AS c
      LEFT JOIN /*schema*/events AS e ON e.id = c.event_id
), recorded AS (
    INSERT INTO /*schema*/aggregate_skips (aggregate_type, aggregate_id, aggregate_seq,
                                           handler, event_id)
    SELECT aggregate_type, aggregate_id, aggregate_seq, handler, event_id
      FROM numbered
     WHERE aggregate_seq IS NOT NULL
        ON CONFLICT DO NOTHING
    RETURNING event_id, handler
), woken AS (
    UPDATE /*schema*/events AS w
       SET next_attempt_at = greatest(now(), w.created_at + interval '1 microsecond')
      FROM numbered AS n
     WHERE n.handler = '' AND n.aggregate_seq IS NOT NULL
       AND w.aggregate_type = n.aggregate_type AND w.aggregate_id = n.aggregate_id
       AND w.aggregate_seq > n.aggregate_seq
       AND w.status = 'pending' AND w.last_error = 'waiting_for_head'
       AND w.next_attempt_at > now()
    RETURNING w.aggregate_type, w.aggregate_id
)
SELECT n.event_id, n.handler, n.aggregate_type, n.aggregate_id::text AS aggregate_id,
       n.aggregate_seq,
       EXISTS (SELECT 1 FROM recorded AS r
                WHERE r.event_id = n.event_id AND r.handler = n.handler) AS skipped,
       (SELECT count(*) FROM woken AS w
         WHERE w.aggregate_type = n.aggregate_type AND w.aggregate_id = n.aggregate_id
           AND n.handler = '') AS woken,
       CASE WHEN n.aggregate_seq IS NULL THEN 'not ordered: it has no aggregate_seq, '
                                              'so nothing waits behind it'
            WHEN NOT EXISTS (SELECT 1 FROM recorded AS r
                              WHERE r.event_id = n.event_id AND r.handler = n.handler)
            THEN 'skipped already' END AS reason
  FROM numbered AS n
 ORDER BY n.event_id, n.handler
