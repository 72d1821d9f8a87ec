-- ledger_claim_ordered: claim (event, handler) for a batch with ordered
-- events (an aggregate_seq): ledger_claim.sql's $1-$5, then per event of
-- $2, in its order: $6 aggregate_type (text[]), $7 aggregate_id (uuid[]),
-- $8 aggregate_seq (bigint[]; NULL: unordered), $9 message id, $10
-- subject, $11 envelope (text[]: what a parked event needs to run later;
-- NULL arrays in a transaction, where ledger_parked_fill.sql then gives
-- the parked events theirs before the transaction ends).
-- The same columns as ledger_claim.sql, and one more state: parked (an
-- early event, kept in parked_events; ack it). See ledger_claim_ordered()
-- in migration 0017. Its last argument, false: the claim makes no progress
-- row; the done mark (ledger_mark_done_ordered.sql) makes it (0031).
SELECT c.event_id, c.state, c.attempts, c.defer_ms, c.owner_token
  FROM /*schema*/ledger_claim_ordered($1::text, $2::uuid[], $3::integer, $4::integer,
                                      $5::boolean, $6::text[], $7::uuid[], $8::bigint[],
                                      $9::text[], $10::text[], $11::text[], false)
       WITH ORDINALITY AS c(event_id, state, attempts, defer_ms, owner_token, ord)
 ORDER BY c.ord
