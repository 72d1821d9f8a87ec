-- 0030_ordered_claim_of_ready_events_takes_no_lock: an external handler's
-- ordered claim (claim_done false: exec:, http:, the SQL API's claim())
-- whose every event may run now reads the progress rows without locking
-- them and goes straight to the plain claim.
--
-- The locks of 0017 are there for the events that park: a replica that
-- parks n + 1 holds its aggregate's progress row until its park commits,
-- so the replica finishing n (whose done mark writes that row) commits
-- after it, and its sweep finds the park at once instead of a second
-- later. An event that runs parks nothing, and a claim in progress writes
-- no progress: it needs no lock. It is ready when its number is at most
-- one past the progress read (read as committed; a stale read is lower,
-- so it can only keep an event from running, never let one run early),
-- and the plain claim's lease on (event, handler) keeps two replicas from
-- running it twice, as before. A batch with an event that is not ready,
-- or with an aggregate twice, takes the locked path unchanged.
--
-- The progress rows missing are made (at 0, as the locked path makes
-- them) before the claim, so every done mark finds its row to move on:
-- the previous release's done mark only updates. The events seen for the
-- first time are then claimed by one plain insert, as unordered ones are
-- (ledger_claim_fresh.sql), and only the others by ledger_claim(), whose
-- subtransaction and read back of every row cost about as much again.
--
-- Timed on outbox-bench consume --case http (each event its own
-- aggregate, 250 events a claim): the locked path spent about 9 ms a call
-- on its locks, order check and key sort beside the plain claim's 7 ms.
--
-- 0027's function keeps its body and settings under a new name, for the
-- locked path; a later migration that changes the order rule changes it
-- there, and this function's readiness test with it.

ALTER FUNCTION /*schema*/ledger_claim_ordered(text, uuid[], integer, integer, boolean, text[],
                                              uuid[], bigint[], text[], text[], text[])
    RENAME TO ledger_claim_ordered_locked;

-- The claim of a batch with ordered events, with ledger_claim_ordered_locked()'s
-- arguments and results. A claim in progress (claim_done false) whose
-- aggregates come once each, every event at most one past its handler's
-- progress (a missing row reads 0), makes the missing progress rows at 0 and
-- claims its events with no lock on the progress: those seen for the first
-- time by one plain insert, the others through ledger_claim(). Any other
-- batch is claimed by ledger_claim_ordered_locked().
CREATE FUNCTION /*schema*/ledger_claim_ordered(claim_handler text, claim_ids uuid[],
                                               claim_lease_seconds integer,
                                               claim_lock_wait_ms integer,
                                               claim_done boolean,
                                               claim_types text[],
                                               claim_aggregates uuid[],
                                               claim_seqs bigint[],
                                               claim_message_ids text[],
                                               claim_subjects text[],
                                               claim_envelopes text[])
RETURNS TABLE (event_id uuid, state text, attempts integer, defer_ms bigint, owner_token uuid)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '1s' -- replaced below; the clause scopes the change to the call
AS $fn$
#variable_conflict use_column
DECLARE
    ready boolean := false;
    missing_types text[];
    missing_ids uuid[];
    token uuid := gen_random_uuid();
    fresh_ids uuid[] := '{}';
BEGIN
    IF NOT claim_done
       AND EXISTS (SELECT FROM /*schema*/handler_baselines AS b WHERE b.handler = claim_handler) THEN
        -- Each aggregate's progress by its key (LATERAL ... LIMIT 1 keeps it
        -- an index probe whatever the statistics); a missing row reads 0.
        WITH u AS MATERIALIZED (
            SELECT u.t, u.a, u.s, g.last_seq AS done
              FROM unnest(claim_types, claim_aggregates, claim_seqs) AS u(t, a, s)
              LEFT JOIN LATERAL (
                    SELECT g.last_seq
                      FROM /*schema*/handler_progress AS g
                     WHERE g.handler = claim_handler AND g.aggregate_type = u.t
                       AND g.aggregate_id = u.a
                     LIMIT 1) AS g ON true
             WHERE u.s IS NOT NULL
        )
        SELECT count(*) = count(DISTINCT (u.t, u.a))
                   AND coalesce(bool_and(u.s <= coalesce(u.done, 0) + 1), true),
               coalesce(array_agg(u.t ORDER BY u.t, u.a) FILTER (WHERE u.done IS NULL), '{}'),
               coalesce(array_agg(u.a ORDER BY u.t, u.a) FILTER (WHERE u.done IS NULL), '{}')
          INTO ready, missing_types, missing_ids
          FROM u;
    END IF;
    IF ready THEN
        -- The progress rows missing are made, in key order as the locked
        -- path makes them (one made since is kept); then the events this
        -- handler sees for the first time (the usual case) are claimed by
        -- one plain insert, as ledger_claim_fresh.sql claims unordered ones,
        -- and only the others go through ledger_claim() below. A row another
        -- open transaction is inserting (a progress row or a claim), not let
        -- go within the wait, undoes both (a savepoint): the locked path
        -- then decides, and says busy where it must.
        PERFORM set_config('lock_timeout', greatest(claim_lock_wait_ms, 1) || 'ms', true);
        BEGIN
            IF cardinality(missing_types) > 0 THEN
                INSERT INTO /*schema*/handler_progress AS g (handler, aggregate_type,
                                                             aggregate_id, last_seq)
                SELECT claim_handler, k.t, k.a, 0
                  FROM unnest(missing_types, missing_ids) WITH ORDINALITY AS k(t, a, ord)
                 ORDER BY k.ord
                    ON CONFLICT (handler, aggregate_type, aggregate_id) DO NOTHING;
            END IF;
            WITH fresh AS (
                INSERT INTO /*schema*/processed_events AS p (event_id, handler, status,
                                                             owner_token, started_at,
                                                             claimed_until)
                SELECT u.id, claim_handler, 'in_progress', token, now(),
                       now() + make_interval(secs => claim_lease_seconds)
                  FROM (SELECT DISTINCT x.id FROM unnest(claim_ids) AS x(id)) AS u
                 ORDER BY u.id
                    ON CONFLICT (event_id, handler) DO NOTHING
                RETURNING p.event_id
            )
            SELECT coalesce(array_agg(f.event_id), '{}') INTO fresh_ids FROM fresh AS f;
        EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
            ready := false;
        END;
    END IF;
    IF NOT ready THEN
        RETURN QUERY
        SELECT c.event_id, c.state, c.attempts, c.defer_ms, c.owner_token
          FROM /*schema*/ledger_claim_ordered_locked(claim_handler, claim_ids, claim_lease_seconds,
                                                     claim_lock_wait_ms, claim_done, claim_types,
                                                     claim_aggregates, claim_seqs,
                                                     claim_message_ids, claim_subjects,
                                                     claim_envelopes) AS c;
        RETURN;
    END IF;
    RETURN QUERY
    WITH ids AS (
        SELECT u.id, u.ord, row_number() OVER (PARTITION BY u.id ORDER BY u.ord) AS nth,
               f.id IS NOT NULL AS fresh
          FROM unnest(claim_ids) WITH ORDINALITY AS u(id, ord)
          LEFT JOIN unnest(fresh_ids) AS f(id) ON f.id = u.id
    ), others AS (
        SELECT i.id, i.ord, row_number() OVER (ORDER BY i.ord) AS k
          FROM ids AS i
         WHERE NOT i.fresh
    ), rest AS (
        -- not called at all when every event was fresh
        SELECT c.state, c.attempts, c.defer_ms, c.owner_token, c.ord
          FROM (SELECT 1 WHERE EXISTS (SELECT 1 FROM others)) AS any_other
         CROSS JOIN LATERAL
               /*schema*/ledger_claim(claim_handler, ARRAY(SELECT o.id FROM others AS o
                                                           ORDER BY o.ord),
                                      claim_lease_seconds, claim_lock_wait_ms, false)
               WITH ORDINALITY AS c(event_id, state, attempts, defer_ms, owner_token, ord)
    )
    -- a repeated id runs once: its later copies are busy, as with ledger_claim()
    SELECT i.id,
           coalesce(r.state, CASE WHEN i.nth = 1 THEN 'run' ELSE 'busy' END),
           coalesce(r.attempts, 0),
           coalesce(r.defer_ms,
                    CASE WHEN i.nth = 1 THEN 0 ELSE claim_lease_seconds::bigint * 1000 END),
           CASE WHEN r.state IS NULL AND i.nth = 1 THEN token ELSE r.owner_token END
      FROM ids AS i
      LEFT JOIN others AS o ON o.ord = i.ord
      LEFT JOIN rest AS r ON r.ord = o.k
     ORDER BY i.ord;
END
$fn$;
