-- trace_event: the outbox row of one event, for outboxctl trace.
-- $1: event id.
-- An ordered event (aggregate_seq set) also says which event it waits for:
-- its predecessor, while that one is neither published nor skipped (the
-- relay publishes an aggregate from its head, migration 0016), with that
-- one's status and reason.
SELECT e.id, e.status, e.event_type, e.aggregate_type, e.aggregate_id, e.aggregate_seq,
       e.attempts, e.lease_expiries, e.last_error, e.created_at, e.next_attempt_at,
       e.leased_until, e.published_at, e.stream_seq, h.id AS waits_for,
       h.status AS waits_for_status, h.last_error AS waits_for_reason
  FROM /*schema*/events AS e
  LEFT JOIN LATERAL (
       SELECT p.id, p.status, p.last_error
         FROM /*schema*/events AS p
        WHERE e.aggregate_seq > 1
          AND p.aggregate_type = e.aggregate_type AND p.aggregate_id = e.aggregate_id
          AND p.aggregate_seq = e.aggregate_seq - 1
          AND e.published_at IS NULL
          AND /*schema*/head_waits(e.aggregate_type, e.aggregate_id, e.aggregate_seq)) AS h ON true
 WHERE e.id = $1::uuid
