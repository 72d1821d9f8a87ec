-- ledger_parked_take: lease up to $2 of handler $1's parked events whose
-- predecessor is now done or skipped, for $3 seconds, to run them like
-- delivered messages (migration 0017). SKIP LOCKED and the lease keep two
-- replicas' sweeps on different rows. A row whose number the handler is
-- already past (done, its ack lost) comes too: the claim says done and
-- the ack removes it.
-- Returns event_id, message_id, subject, envelope, lease_token.
WITH ready AS (
    SELECT p.event_id
      FROM /*schema*/parked_events AS p
      LEFT JOIN /*schema*/handler_progress AS g
             ON g.handler = p.handler AND g.aggregate_type = p.aggregate_type
            AND g.aggregate_id = p.aggregate_id
     WHERE p.handler = $1::text
       AND (p.leased_until IS NULL OR p.leased_until < now())
       AND /*schema*/ledger_order_ready(p.handler, p.aggregate_type, p.aggregate_id,
                                        coalesce(g.last_seq, 0), p.aggregate_seq)
     ORDER BY p.aggregate_type, p.aggregate_id, p.aggregate_seq
     LIMIT $2::integer
       FOR UPDATE OF p SKIP LOCKED
)
UPDATE /*schema*/parked_events AS p
   SET lease_token = gen_random_uuid(),
       leased_until = now() + make_interval(secs => $3::integer)
  FROM ready AS r
 WHERE p.handler = $1::text AND p.event_id = r.event_id
RETURNING p.event_id, p.message_id, p.subject, p.envelope, p.lease_token
