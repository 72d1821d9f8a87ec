-- ledger_claim_fresh: ledger_claim.sql for unordered events, cheaper for
-- the events this handler sees for the first time (the usual case): their
-- rows are written by one plain INSERT ... ON CONFLICT DO NOTHING, and only
-- the others (a row exists already: done, dead, held, backing off, or
-- claimable again) go through ledger_claim(). The same $1-$5, the same
-- columns, one row per element of $2 in its order; a repeated id runs once
-- (its later copies are busy, as with ledger_claim()). A row another open
-- transaction is inserting is waited for up to $4 ms (lock_timeout, set for
-- the rest of the transaction: used only where the claim ends it).
WITH ids AS (
    SELECT u.id, u.ord, row_number() OVER (PARTITION BY u.id ORDER BY u.ord) AS nth
      FROM unnest($2::uuid[]) WITH ORDINALITY AS u(id, ord)
     WHERE (SELECT set_config('lock_timeout', greatest($4::integer, 1) || 'ms', true)) IS NOT NULL
), token AS (
    SELECT gen_random_uuid() AS token
), fresh AS (
    INSERT INTO /*schema*/processed_events AS p (event_id, handler, status, owner_token,
                                                 started_at, claimed_until, finished_at)
    SELECT i.id, $1::text,
           CASE WHEN $5::boolean THEN 'done' ELSE 'in_progress' END,
           CASE WHEN NOT $5::boolean THEN t.token END,
           now(),
           CASE WHEN NOT $5::boolean THEN now() + make_interval(secs => $3::integer) END,
           CASE WHEN $5::boolean THEN now() END
      FROM ids AS i CROSS JOIN token AS t
     WHERE i.nth = 1
     ORDER BY i.id
        ON CONFLICT (event_id, handler) DO NOTHING
    RETURNING p.event_id, p.owner_token AS token
), others AS (
    SELECT i.id, i.ord, row_number() OVER (ORDER BY i.ord) AS k
      FROM ids AS i
     WHERE NOT EXISTS (SELECT 1 FROM fresh AS f WHERE f.event_id = i.id)
), rest AS (
    -- Not called at all when every event was fresh.
    SELECT c.state, c.attempts, c.defer_ms, c.owner_token, c.ord
      FROM (SELECT 1 WHERE EXISTS (SELECT 1 FROM others)) AS any_other
     CROSS JOIN LATERAL
           /*schema*/ledger_claim($1::text, ARRAY(SELECT o.id FROM others AS o ORDER BY o.ord),
                                  $3::integer, $4::integer, $5::boolean)
           WITH ORDINALITY AS c(event_id, state, attempts, defer_ms, owner_token, ord)
)
SELECT i.id,
       coalesce(r.state, CASE WHEN i.nth = 1 THEN 'run' ELSE 'busy' END),
       coalesce(r.attempts, 0),
       coalesce(r.defer_ms, CASE WHEN i.nth = 1 THEN 0 ELSE $3::bigint * 1000 END),
       CASE WHEN r.state IS NULL AND i.nth = 1 THEN f.token ELSE r.owner_token END
  FROM ids AS i
  LEFT JOIN fresh AS f ON f.event_id = i.id
  LEFT JOIN others AS o ON o.ord = i.ord
  LEFT JOIN rest AS r ON r.ord = o.k
 ORDER BY i.ord
