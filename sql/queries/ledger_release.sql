-- ledger_release: give a claim back without counting an attempt.
-- $1: event id; $2: handler; $3: owner token; $4: delay in ms before it is due again.
-- Guarded by the owner token, so a stale owner changes nothing.
UPDATE /*schema*/processed_events
   SET owner_token = NULL, claimed_until = NULL,
       next_attempt_at = now() + interval '1 millisecond' * $4::integer
 WHERE event_id = $1::uuid AND handler = $2::text
   AND owner_token = $3::uuid AND status = 'in_progress'
