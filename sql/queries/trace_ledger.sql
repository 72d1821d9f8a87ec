-- trace_ledger: every handler's ledger row for one event, for outboxctl trace.
-- $1: event id.
SELECT handler, status, attempts, owner_token, started_at, claimed_until, next_attempt_at,
       finished_at, dead_at, last_error
  FROM /*schema*/processed_events
 WHERE event_id = $1::uuid
 ORDER BY handler
