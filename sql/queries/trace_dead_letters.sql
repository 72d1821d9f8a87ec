-- trace_dead_letters: one event's dead letters (handler '' is the relay), for outboxctl trace.
-- $1: event id.
SELECT handler, reason, attempts, dead_at, requeued_at, requeue_count
  FROM /*schema*/dead_letters
 WHERE event_id = $1::uuid
 ORDER BY handler
