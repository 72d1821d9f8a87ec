-- status_blocked_aggregates: ordered aggregates held up at a head, for
-- `outboxctl status` (docs/ordering.md), at most 100, the longest held
-- first. handler '' is the relays': a dead or quarantined head not skipped
-- holds the aggregate for every handler. A handler's name: events of the
-- aggregate parked for that handler behind a head it is not done with;
-- the head's ledger state says why (a dead letter, attempts failing, a run
-- going on, or not delivered yet). waiting: the events held behind it.
WITH relay AS (
    SELECT ''::text AS handler, d.aggregate_type, d.aggregate_id, d.aggregate_seq AS head_seq,
           d.id AS head_event_id, d.status AS head_status,
           coalesce(d.last_error, '') AS reason,
           (SELECT count(*) FROM /*schema*/events AS w
             WHERE w.aggregate_type = d.aggregate_type AND w.aggregate_id = d.aggregate_id
               AND w.aggregate_seq > d.aggregate_seq AND w.published_at IS NULL) AS waiting,
           coalesce(d.leased_until, d.created_at) AS since
      FROM /*schema*/events AS d
     WHERE d.published_at IS NULL AND d.next_attempt_at > d.created_at
       AND d.next_attempt_at = 'infinity' AND d.aggregate_seq IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM /*schema*/aggregate_skips AS k
                        WHERE k.aggregate_type = d.aggregate_type
                          AND k.aggregate_id = d.aggregate_id
                          AND k.aggregate_seq = d.aggregate_seq AND k.handler = '')
), parked AS (
    SELECT k.handler, k.aggregate_type, k.aggregate_id, coalesce(g.last_seq, 0) + 1 AS head_seq,
           e.id AS head_event_id,
           CASE WHEN l.event_id IS NOT NULL THEN 'dead letter'
                WHEN p.event_id IS NULL THEN 'not delivered'
                WHEN p.attempts > 0 THEN 'failing'
                ELSE 'running' END AS head_status,
           coalesce(l.reason, p.last_error, '') AS reason,
           k.waiting, k.since
      FROM (SELECT handler, aggregate_type, aggregate_id, count(*) AS waiting,
                   min(parked_at) AS since
              FROM /*schema*/parked_events
             GROUP BY handler, aggregate_type, aggregate_id) AS k
      LEFT JOIN /*schema*/handler_progress AS g
             ON g.handler = k.handler AND g.aggregate_type = k.aggregate_type
            AND g.aggregate_id = k.aggregate_id
      LEFT JOIN /*schema*/events AS e
             ON e.aggregate_type = k.aggregate_type AND e.aggregate_id = k.aggregate_id
            AND e.aggregate_seq = coalesce(g.last_seq, 0) + 1
      LEFT JOIN /*schema*/processed_events AS p
             ON p.event_id = e.id AND p.handler = k.handler
      LEFT JOIN /*schema*/dead_letters AS l
             ON l.event_id = e.id AND l.handler = k.handler AND l.requeued_at IS NULL
)
SELECT handler, aggregate_type, aggregate_id::text AS aggregate_id, head_seq,
       head_event_id::text AS head_event_id, head_status, reason, waiting,
       floor(extract(epoch FROM now() - since))::bigint AS held_s
  FROM (SELECT * FROM relay UNION ALL SELECT * FROM parked) AS b
 ORDER BY since, handler, aggregate_type, aggregate_id
 LIMIT 100
