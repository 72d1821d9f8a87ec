-- ledger_mark_done: mark done the claims of one handler, all in one statement.
-- $1: handler; $2: event ids (uuid[]); $3: their owner tokens (uuid[], same order).
-- Guarded by the owner token: a claim taken over meanwhile (its lease ran
-- out) is left to its new owner, and the caller sees fewer rows changed.
UPDATE /*schema*/processed_events AS p
   SET status = 'done', finished_at = now(), owner_token = NULL, claimed_until = NULL
  FROM unnest($2::uuid[], $3::uuid[]) AS c(event_id, owner_token)
 WHERE p.event_id = c.event_id AND p.handler = $1::text
   AND p.owner_token = c.owner_token AND p.status = 'in_progress'
