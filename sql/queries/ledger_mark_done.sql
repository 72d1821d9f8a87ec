-- ledger_mark_done: mark done the claims of one handler, all in one statement.
-- $1: handler; $2: event ids (uuid[]); $3: their owner tokens (uuid[], same order).
-- Guarded by the owner token: a claim taken over meanwhile (its lease ran
-- out) is left to its new owner, and the caller sees fewer rows changed.
--
-- Each claim is found by its key (the primary key, in a subquery per
-- element), then updated by its row address (a TID scan): the only plan
-- this form has. Written as a join of the arrays to the table, the ledger's
-- unnamed statement is planned for each call with the array's real length,
-- and from a few thousand rows up to a few hundred thousand the planner
-- priced a sequential scan of the whole table under 500 key lookups (a
-- hash join): 42 ms a batch of 500 over 40,000 rows, against 2 ms by key.
-- A row updated by another transaction after it was found has a new
-- address, so the update skips it, as the token guard would: it is no
-- longer this claim.
UPDATE /*schema*/processed_events AS p
   SET status = 'done', finished_at = now(), owner_token = NULL, claimed_until = NULL
 WHERE p.ctid = ANY (ARRAY(
           SELECT (SELECT q.ctid
                     FROM /*schema*/processed_events AS q
                    WHERE q.event_id = c.event_id AND q.handler = $1::text
                      AND q.owner_token = c.owner_token AND q.status = 'in_progress')
             FROM unnest($2::uuid[], $3::uuid[]) AS c(event_id, owner_token)))
