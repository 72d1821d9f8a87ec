-- dead_list: the dead letters the filters choose, for outboxctl dead list.
-- $1-$9: the filters (src/outboxctl/cli.h: handler, event type, aggregate
-- type, aggregate id, since, until, reason pattern, ids, limit).
SELECT d.event_id, d.handler, d.reason, d.attempts, d.dead_at,
       coalesce(d.envelope ->> 'event_type', e.event_type) AS event_type,
       coalesce(d.envelope ->> 'aggregate_type', e.aggregate_type) AS aggregate_type,
       coalesce(d.envelope ->> 'aggregate_id', e.aggregate_id::text) AS aggregate_id,
       d.requeued_at, d.requeue_count,
       EXISTS (SELECT 1 FROM /*schema*/aggregate_skips AS k
                WHERE k.event_id = d.event_id AND k.handler = d.handler) AS skipped
  FROM /*schema*/dead_letters_matching($1::text, $2::text, $3::text, $4::uuid, $5::timestamptz,
                                       $6::timestamptz, $7::text, $8::uuid[], $9::bigint,
                                       false) AS m
  JOIN /*schema*/dead_letters AS d USING (event_id, handler)
  LEFT JOIN /*schema*/events AS e ON e.id = d.event_id
 ORDER BY d.dead_at, d.event_id, d.handler
