-- ledger_claim: claim (event, handler) for a batch of events in one call.
-- $1: handler; $2: event ids (uuid[], may repeat); $3: lease in seconds;
-- $4: longest wait in ms for a row another open transaction holds;
-- $5: write the claims as done (a transactional batch's fast path).
-- One row per element of $2, in its order: state (run, done, busy,
-- backoff, dead), attempts so far, defer_ms (busy, backoff) and the owner
-- token (run). See ledger_claim() in migrations 0003 and 0005.
SELECT c.event_id, c.state, c.attempts, c.defer_ms, c.owner_token
  FROM /*schema*/ledger_claim($1::text, $2::uuid[], $3::integer, $4::integer, $5::boolean)
       WITH ORDINALITY AS c(event_id, state, attempts, defer_ms, owner_token, ord)
 ORDER BY c.ord
