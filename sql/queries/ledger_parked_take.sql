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
-- The work is per aggregate, not per parked row: `heads` walks the
-- aggregate index one aggregate at a time (a loose index scan: each step
-- one descent to the next aggregate's lowest row not leased), the order
-- check reads only those heads, and only a ready aggregate's rows are read
-- past its head, as far as its chain goes and $2 at most. Thousands of
-- events parked behind a dead head cost one index read per sweep.
-- Returns event_id, message_id, subject, envelope, lease_token, in
-- aggregate and number order.
WITH RECURSIVE heads AS (
    (SELECT p.aggregate_type, p.aggregate_id, p.aggregate_seq
       FROM /*schema*/parked_events AS p
      WHERE p.handler = $1::text
        AND (p.leased_until IS NULL OR p.leased_until < now())
      ORDER BY p.aggregate_type, p.aggregate_id, p.aggregate_seq
      LIMIT 1)
    UNION ALL
    SELECT n.aggregate_type, n.aggregate_id, n.aggregate_seq
      FROM heads AS h
     CROSS JOIN LATERAL (
            SELECT p.aggregate_type, p.aggregate_id, p.aggregate_seq
              FROM /*schema*/parked_events AS p
             WHERE p.handler = $1::text
               AND (p.aggregate_type, p.aggregate_id) > (h.aggregate_type, h.aggregate_id)
               AND (p.leased_until IS NULL OR p.leased_until < now())
             ORDER BY p.aggregate_type, p.aggregate_id, p.aggregate_seq
             LIMIT 1) AS n
), ready_heads AS (
    -- Each head's progress row by its key, a probe per head (LATERAL ...
    -- LIMIT 1 keeps it one): joined with the handler as a constant,
    -- statistics taken while the handler had one row estimate its rows at
    -- one, and the planner read all of them per sweep (test_parked_plan).
    SELECT h.aggregate_type, h.aggregate_id, h.aggregate_seq AS first_seq
      FROM heads AS h
      LEFT JOIN LATERAL (
            SELECT g.last_seq
              FROM /*schema*/handler_progress AS g
             WHERE g.handler = $1::text AND g.aggregate_type = h.aggregate_type
               AND g.aggregate_id = h.aggregate_id
             LIMIT 1) AS g ON true
     WHERE /*schema*/ledger_order_ready($1::text, h.aggregate_type, h.aggregate_id,
                                       coalesce(g.last_seq, 0), h.aggregate_seq)
), chains AS (
    SELECT c.event_id
      FROM ready_heads AS r
     CROSS JOIN LATERAL (
            SELECT p.event_id, p.aggregate_seq,
                   row_number() OVER (ORDER BY p.aggregate_seq) AS k
              FROM /*schema*/parked_events AS p
             WHERE p.handler = $1::text AND p.aggregate_type = r.aggregate_type
               AND p.aggregate_id = r.aggregate_id AND p.aggregate_seq >= r.first_seq
               AND (p.leased_until IS NULL OR p.leased_until < now())
             ORDER BY p.aggregate_seq
             LIMIT $2::integer) AS c
     WHERE c.aggregate_seq = r.first_seq + c.k - 1
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
