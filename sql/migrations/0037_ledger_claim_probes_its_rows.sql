-- 0037_ledger_claim_probes_its_rows: ledger_claim() reads each event's
-- ledger row by a probe on its key, whatever the table's size and
-- statistics say.
--
-- ledger_claim() is the claim of every event that has a ledger row
-- already (a redelivery, a retry, an event claimed elsewhere), of
-- receive(), claim() and try_claim(), and of the ordered claim's general
-- path. Its last statement joined the batch to processed_events by key
-- and left the join's shape to the planner; so did the NOT EXISTS of
-- ledger_claim_rows(). For a batch of 500 over a ledger of 20,000 to
-- about 100,000 rows, with fresh statistics, a hash join over a
-- sequential scan of the handler's rows costs less on paper than 500
-- index probes (random_page_cost prices each probe as a read from disk,
-- where the ledger is in memory): each claim read the whole ledger, 12 ms
-- of a 25 ms claim at 20,000 rows (test_ledger_claim_plan). With
-- statistics that put the table at a row or two while it holds millions
-- (see 0036), there is no bound at all.
--
-- Both statements now look each id up by itself: the row's read is a
-- LATERAL subquery with LIMIT 1, and the NOT EXISTS carries OFFSET 0 (it
-- stays a subplan run per row: PostgreSQL turns an EXISTS into a join, or
-- a hashed subplan, only without OFFSET). Sequential and bitmap scans are
-- off for the call (SET clauses, as in 0029 and 0036), so each probe is an
-- index scan of the primary key; JIT is off with them, as in 0029, since a
-- plan priced with a disabled scan could cross jit_above_cost.
--
-- ledger_claim_rows() becomes PL/pgSQL: a SQL function that is not inlined
-- (an INSERT never is) is parsed and planned on every call, which a batch
-- pays once but try_claim() paid per event (0.15 ms of its 1 ms).

-- The rows of a claim: 0005's, with the existing rows looked up by a
-- probe per id, in PL/pgSQL so its plan is kept (0037).
CREATE OR REPLACE FUNCTION /*schema*/ledger_claim_rows(claim_handler text, claim_ids uuid[],
                                            claim_token uuid, claim_lease_seconds integer,
                                            claim_done boolean)
RETURNS TABLE (event_id uuid, attempts integer)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    INSERT INTO /*schema*/processed_events AS p (event_id, handler, status, owner_token,
                                                 started_at, claimed_until, finished_at)
    SELECT i.id, claim_handler,
           CASE WHEN claim_done THEN 'done' ELSE 'in_progress' END,
           CASE WHEN NOT claim_done THEN claim_token END,
           now(),
           CASE WHEN NOT claim_done THEN now() + make_interval(secs => claim_lease_seconds) END,
           CASE WHEN claim_done THEN now() END
      FROM (SELECT DISTINCT u.id FROM unnest(claim_ids) AS u(id)) AS i
     WHERE NOT EXISTS (
               SELECT 1
                 FROM /*schema*/processed_events AS q
                WHERE q.event_id = i.id AND q.handler = claim_handler
                  AND NOT (q.status = 'in_progress' AND q.dead_at IS NULL
                           AND (q.owner_token IS NULL OR q.claimed_until < now())
                           AND coalesce(q.next_attempt_at, '-infinity') <= now())
               OFFSET 0) -- a probe per id, never an anti-join: see above
     ORDER BY i.id
        ON CONFLICT (event_id, handler) DO UPDATE
       SET status = excluded.status,
           owner_token = excluded.owner_token,
           started_at = excluded.started_at,
           claimed_until = excluded.claimed_until,
           finished_at = excluded.finished_at
     WHERE p.status = 'in_progress' AND p.dead_at IS NULL
       AND (p.owner_token IS NULL OR p.claimed_until < now())
       AND coalesce(p.next_attempt_at, '-infinity') <= now()
    RETURNING p.event_id, p.attempts;
END
$fn$;

-- As 0003's ledger_claim, through the rows above; a claim written as done
-- still reports 'run' (with the token, which only guards in-progress rows).
-- Each row is read by a probe on its key (0037).
CREATE OR REPLACE FUNCTION /*schema*/ledger_claim(claim_handler text, claim_ids uuid[],
                                       claim_lease_seconds integer, claim_lock_wait_ms integer,
                                       claim_done boolean)
RETURNS TABLE (event_id uuid, state text, attempts integer, defer_ms bigint, owner_token uuid)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '1s' -- replaced below; the clause scopes the change to the call
SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off
AS $fn$
#variable_conflict use_column
DECLARE
    token uuid := gen_random_uuid();
    claimed uuid[] := '{}';
    one_id uuid;
BEGIN
    PERFORM set_config('lock_timeout', greatest(claim_lock_wait_ms, 1) || 'ms', true);
    BEGIN
        SELECT coalesce(array_agg(r.event_id), '{}') INTO claimed
          FROM /*schema*/ledger_claim_rows(claim_handler, claim_ids, token,
                                           claim_lease_seconds, claim_done) AS r;
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        PERFORM set_config('lock_timeout', '1ms', true);
        FOREACH one_id IN ARRAY claim_ids LOOP
            BEGIN
                SELECT claimed || coalesce(array_agg(r.event_id), '{}') INTO claimed
                  FROM /*schema*/ledger_claim_rows(claim_handler, ARRAY[one_id], token,
                                                   claim_lease_seconds, claim_done) AS r;
            EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
                NULL; -- held elsewhere: reported busy below
            END;
        END LOOP;
    END;
    RETURN QUERY
    SELECT i.id,
           s.state,
           coalesce(p.attempts, 0),
           CASE s.state
               WHEN 'busy' THEN
                   CASE WHEN p.owner_token IS NOT NULL AND p.claimed_until >= now()
                        THEN greatest(ceil(extract(epoch FROM p.claimed_until - now()) * 1000), 1)
                        ELSE 1000 END -- held by an open transaction: look again in a second
               WHEN 'backoff' THEN
                   greatest(ceil(extract(epoch FROM p.next_attempt_at - now()) * 1000), 1)
               ELSE 0
           END::bigint,
           CASE WHEN s.state = 'run' THEN token END
      FROM (SELECT u.id, u.ord, row_number() OVER (PARTITION BY u.id ORDER BY u.ord) AS nth
              FROM unnest(claim_ids) WITH ORDINALITY AS u(id, ord)) AS i
      LEFT JOIN (SELECT DISTINCT c.id FROM unnest(claimed) AS c(id)) AS c ON c.id = i.id
      -- a probe per id (a subquery per row), never a join that reads the ledger
      LEFT JOIN LATERAL (
           SELECT q.event_id, q.status, q.attempts, q.owner_token, q.claimed_until,
                  q.next_attempt_at, q.dead_at
             FROM /*schema*/processed_events AS q
            WHERE q.event_id = i.id AND q.handler = claim_handler
            LIMIT 1) AS p ON true
     CROSS JOIN LATERAL (
           SELECT CASE
                      -- A repeated id runs once: its later copies find our own claim.
                      WHEN c.id IS NOT NULL AND i.nth = 1 THEN 'run'
                      WHEN p.event_id IS NULL THEN 'busy'
                      WHEN p.status = 'done' THEN 'done'
                      WHEN p.dead_at IS NOT NULL THEN 'dead'
                      WHEN p.owner_token IS NOT NULL AND p.claimed_until >= now() THEN 'busy'
                      WHEN p.next_attempt_at > now() THEN 'backoff'
                      ELSE 'busy' -- claimable, but held by an open transaction
                  END AS state) AS s
     ORDER BY i.ord;
END
$fn$;
