-- 0031_done_mark_makes_the_progress_row: an external handler's ordered
-- claim (claim_done false: exec:, http:) no longer makes the progress rows
-- its aggregates lack; the done mark makes each row, at the number it
-- marks done (sql/queries/ledger_mark_done_ordered.sql inserts the row or
-- moves it on, in one statement).
--
-- The claim made a missing row at 0 so that the previous release's done
-- mark, which only updates, found it; the row was then written twice for
-- an aggregate's first event (made at 0, moved to 1), and an aggregate
-- whose events are handled once each (a sign-up, a one-event order) paid
-- a progress row insert at every claim. Timed on outbox-bench consume
-- --case http (each event its own aggregate): the insert was about 11 us
-- of the claim's 26 us an event, and the probe of the progress row another
-- 5; an aggregate's first event needs neither (number 1 may always run).
--
-- Old and new consumers side by side, during a rolling upgrade: the
-- function gains a last argument, claim_makes_progress, default true. The
-- previous release's consumers call it without that argument and keep the
-- old behaviour their update-only done mark relies on; this release's
-- consumers pass false. Each consumer marks done what it claimed, so an
-- event's claim and done mark always come from one release. The SQL API
-- (claim(), receive(), try_claim()) calls it as before: its complete()
-- only updates.
--
-- A missing row still reads 0 everywhere (the locked path, the parked
-- sweep, outboxctl status); the locked path makes it when it must lock it.

DROP FUNCTION /*schema*/ledger_claim_ordered(text, uuid[], integer, integer, boolean, text[],
                                             uuid[], bigint[], text[], text[], text[]);

-- The claim of a batch with ordered events, with ledger_claim_ordered_locked()'s
-- arguments and results, and claim_makes_progress. A claim in progress
-- (claim_done false) whose aggregates come once each, every event at most
-- one past its handler's progress (a missing row reads 0), claims its
-- events with no lock on the progress: those seen for the first time by one
-- plain insert, the others through ledger_claim(). With
-- claim_makes_progress it first makes the missing progress rows at 0 (for a
-- done mark that only updates); without, it makes none and reads no row for
-- an aggregate's first event. Any other batch is claimed by
-- ledger_claim_ordered_locked().
CREATE FUNCTION /*schema*/ledger_claim_ordered(claim_handler text, claim_ids uuid[],
                                               claim_lease_seconds integer,
                                               claim_lock_wait_ms integer,
                                               claim_done boolean,
                                               claim_types text[],
                                               claim_aggregates uuid[],
                                               claim_seqs bigint[],
                                               claim_message_ids text[],
                                               claim_subjects text[],
                                               claim_envelopes text[],
                                               claim_makes_progress boolean DEFAULT true)
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
        -- Number 1 runs whatever the row says: unless rows are to be made,
        -- it is not read.
        WITH u AS MATERIALIZED (
            SELECT u.t, u.a, u.s, g.last_seq AS done
              FROM unnest(claim_types, claim_aggregates, claim_seqs) AS u(t, a, s)
              LEFT JOIN LATERAL (
                    SELECT g.last_seq
                      FROM /*schema*/handler_progress AS g
                     WHERE (claim_makes_progress OR u.s > 1)
                       AND g.handler = claim_handler AND g.aggregate_type = u.t
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
        -- The progress rows missing are made (claim_makes_progress), in key
        -- order as the locked path makes them (one made since is kept);
        -- then the events this
        -- handler sees for the first time (the usual case) are claimed by
        -- one plain insert, as ledger_claim_fresh.sql claims unordered ones,
        -- and only the others go through ledger_claim() below. A row another
        -- open transaction is inserting (a progress row or a claim), not let
        -- go within the wait, undoes both (a savepoint): the locked path
        -- then decides, and says busy where it must.
        PERFORM set_config('lock_timeout', greatest(claim_lock_wait_ms, 1) || 'ms', true);
        BEGIN
            IF claim_makes_progress AND cardinality(missing_types) > 0 THEN
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
