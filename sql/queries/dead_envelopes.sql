-- dead_envelopes: the events of requeued JetStream dead letters, to publish
-- again, for outboxctl dead requeue. $1: event ids (uuid[]); $2: handlers
-- (text[], same order). Columns as lease_batch.sql's first two (id, envelope
-- as text: what the relay publishes), then the message id the requeue uses,
-- <event_id>:requeue:<requeue_count>, which the duplicate window has not seen.
SELECT d.event_id::text AS id, coalesce(e.envelope, d.envelope)::text AS envelope,
       d.event_id || ':requeue:' || d.requeue_count AS msg_id, d.handler
  FROM unnest($1::uuid[], $2::text[]) AS i(event_id, handler)
  JOIN /*schema*/dead_letters AS d ON d.event_id = i.event_id AND d.handler = i.handler
  LEFT JOIN /*schema*/events AS e ON e.id = d.event_id
 ORDER BY d.event_id, d.handler
