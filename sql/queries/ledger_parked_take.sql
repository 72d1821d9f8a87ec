-- ledger_parked_take: lease up to $2 of handler $1's parked events that
-- may run now, for $3 seconds, to run them like delivered messages
-- (migration 0017). Per aggregate that is a chain: its lowest parked
-- number, if its predecessor is done or skipped, and the parked numbers
-- that follow it without a gap, in number order, so a transactional
-- handler runs them one after another in one transaction
-- (ledger_claim_ordered) instead of one sweep each. SKIP LOCKED and the
-- lease keep two replicas' sweeps on different rows. A row whose number
-- the handler is already past (done, its ack lost) comes too: the claim
-- says done and the ack removes it.
-- Returns event_id, message_id, subject, envelope, lease_token, in
-- aggregate and number order.
WITH cand AS (
    SELECT p.event_id, p.aggregate_type, p.aggregate_id, p.aggregate_seq,
           coalesce(g.last_seq, 0) AS done_seq,
           min(p.aggregate_seq) OVER w AS first_seq,
           row_number() OVER w AS k
      FROM /*schema*/parked_events AS p
      LEFT JOIN /*schema*/handler_progress AS g
             ON g.handler = p.handler AND g.aggregate_type = p.aggregate_type
            AND g.aggregate_id = p.aggregate_id
     WHERE p.handler = $1::text
       AND (p.leased_until IS NULL OR p.leased_until < now())
    WINDOW w AS (PARTITION BY p.aggregate_type, p.aggregate_id ORDER BY p.aggregate_seq)
), chains AS (
    SELECT c.event_id
      FROM cand AS c
     WHERE c.aggregate_seq = c.first_seq + c.k - 1
       AND /*schema*/ledger_order_ready($1::text, c.aggregate_type, c.aggregate_id, c.done_seq,
                                        c.first_seq)
), ready AS (
    SELECT p.event_id
      FROM /*schema*/parked_events AS p
     WHERE p.handler = $1::text AND p.event_id = ANY (ARRAY(SELECT event_id FROM chains))
       AND (p.leased_until IS NULL OR p.leased_until < now())
     ORDER BY p.aggregate_type, p.aggregate_id, p.aggregate_seq
     LIMIT $2::integer
       FOR UPDATE OF p SKIP LOCKED
), taken AS (
    UPDATE /*schema*/parked_events AS p
       SET lease_token = gen_random_uuid(),
           leased_until = now() + make_interval(secs => $3::integer)
      FROM ready AS r
     WHERE p.handler = $1::text AND p.event_id = r.event_id
    RETURNING p.event_id, p.message_id, p.subject, p.envelope, p.lease_token,
              p.aggregate_type, p.aggregate_id, p.aggregate_seq
)
SELECT event_id, message_id, subject, envelope, lease_token
  FROM taken
 ORDER BY aggregate_type, aggregate_id, aggregate_seq
