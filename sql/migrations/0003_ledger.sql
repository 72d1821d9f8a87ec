-- 0003_ledger: the consumer ledger's claim (one call per batch), dead-lettered claims.
--
-- Every table and function name is preceded by the schema marker, which
-- the migrator replaces with the quoted OUTBOX_SCHEMA.

-- A claim whose handler exhausted its attempts: the row stays in_progress
-- (the status contract has only in_progress and done) with dead_at set, and
-- is never claimed again; dead_letters holds the envelope and the reason.
-- Adding a column without a default rewrites nothing; the check is
-- validated separately so it takes no lock that stops the consumers.
ALTER TABLE /*schema*/processed_events ADD COLUMN dead_at timestamptz;
ALTER TABLE /*schema*/processed_events
    ADD CONSTRAINT processed_events_dead_in_progress
    CHECK (dead_at IS NULL OR (status = 'in_progress' AND owner_token IS NULL)) NOT VALID;
ALTER TABLE /*schema*/processed_events VALIDATE CONSTRAINT processed_events_dead_in_progress;

-- The claim's writes: a fresh claim row per event, or a takeover of a row
-- that may run now (in progress, not dead, no live owner, backoff over).
-- Rows this snapshot already shows as not claimable are left out, so
-- ON CONFLICT does not lock done or busy rows for the rest of the
-- caller's transaction. Inserted in id order: two batches that share
-- events wait for each other instead of deadlocking. Returns the rows
-- claimed, all now owned by `claim_token`.
CREATE FUNCTION /*schema*/ledger_claim_rows(claim_handler text, claim_ids uuid[],
                                            claim_token uuid, claim_lease_seconds integer)
RETURNS TABLE (event_id uuid, attempts integer)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
    INSERT INTO /*schema*/processed_events AS p (event_id, handler, owner_token, started_at,
                                                 claimed_until)
    SELECT i.id, claim_handler, claim_token, now(),
           now() + make_interval(secs => claim_lease_seconds)
      FROM (SELECT DISTINCT u.id FROM unnest(claim_ids) AS u(id)) AS i
     WHERE NOT EXISTS (
               SELECT 1
                 FROM /*schema*/processed_events AS q
                WHERE q.event_id = i.id AND q.handler = claim_handler
                  AND NOT (q.status = 'in_progress' AND q.dead_at IS NULL
                           AND (q.owner_token IS NULL OR q.claimed_until < now())
                           AND coalesce(q.next_attempt_at, '-infinity') <= now()))
     ORDER BY i.id
        ON CONFLICT (event_id, handler) DO UPDATE
       SET owner_token = excluded.owner_token,
           started_at = excluded.started_at,
           claimed_until = excluded.claimed_until
     WHERE p.status = 'in_progress' AND p.dead_at IS NULL
       AND (p.owner_token IS NULL OR p.claimed_until < now())
       AND coalesce(p.next_attempt_at, '-infinity') <= now()
    RETURNING p.event_id, p.attempts
$fn$;

-- Claims (event, handler) for a batch and says, per input element and in
-- input order, what the caller may do: run (with the new owner token),
-- done, dead, busy (a live claim elsewhere, or a row another open
-- transaction holds) or backoff, with how long to wait in ms.
--
-- A row held by another open transaction (a claim inside a consumer's
-- transaction, not yet committed) is waited for at most
-- claim_lock_wait_ms. If the batch times out (or loses a deadlock), the
-- batch's writes are undone (the block is a subtransaction, so the
-- caller's transaction stays usable) and the events are claimed one by
-- one with a 1 ms wait each: only the held ones come back busy. The SET
-- clause makes the lock_timeout change local to this call, so the
-- caller's own statements keep their lock_timeout.
--
-- The final read is a new statement, so in READ COMMITTED it sees rows
-- that other sessions committed while this call waited for them.
CREATE FUNCTION /*schema*/ledger_claim(claim_handler text, claim_ids uuid[],
                                       claim_lease_seconds integer, claim_lock_wait_ms integer)
RETURNS TABLE (event_id uuid, state text, attempts integer, defer_ms bigint, owner_token uuid)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '1s' -- replaced below; the clause scopes the change to the call
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
                                           claim_lease_seconds) AS r;
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        PERFORM set_config('lock_timeout', '1ms', true);
        FOREACH one_id IN ARRAY claim_ids LOOP
            BEGIN
                SELECT claimed || coalesce(array_agg(r.event_id), '{}') INTO claimed
                  FROM /*schema*/ledger_claim_rows(claim_handler, ARRAY[one_id], token,
                                                   claim_lease_seconds) AS r;
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
      LEFT JOIN /*schema*/processed_events AS p
             ON p.event_id = i.id AND p.handler = claim_handler
     CROSS JOIN LATERAL (
           SELECT CASE
                      -- A repeated id runs once: its later copies find our own live claim.
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

-- `doc` as jsonb, or NULL when it is not valid JSON that jsonb accepts
-- (\u0000, too deep, too big): a dead letter keeps what it can and is
-- still written, so a bad message cannot block its own dead-lettering.
CREATE FUNCTION /*schema*/jsonb_or_null(doc text)
RETURNS jsonb LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    RETURN doc::jsonb;
EXCEPTION WHEN data_exception OR program_limit_exceeded THEN
    RETURN NULL;
END
$fn$;
