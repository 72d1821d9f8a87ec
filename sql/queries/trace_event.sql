-- trace_event: the outbox row of one event, for outboxctl trace.
-- $1: event id.
SELECT id, status, event_type, aggregate_type, aggregate_id, attempts, lease_expiries,
       last_error, created_at, next_attempt_at, leased_until, published_at, stream_seq
  FROM /*schema*/events
 WHERE id = $1::uuid
