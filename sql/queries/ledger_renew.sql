-- ledger_renew: keep a claim alive while its external handler runs.
-- $1: event id; $2: handler; $3: owner token; $4: lease in seconds from now.
-- Guarded by the owner token: no row changed means the claim is no longer
-- this owner's (taken over, settled, dead), and its handler must stop.
UPDATE /*schema*/processed_events
   SET claimed_until = now() + make_interval(secs => $4::integer)
 WHERE event_id = $1::uuid AND handler = $2::text
   AND owner_token = $3::uuid AND status = 'in_progress' AND dead_at IS NULL
