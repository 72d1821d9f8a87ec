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
-- the previous release's done mark only updates.
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
-- goes to the plain claim (ledger_claim) with no lock on the progress; any
-- other batch is claimed by ledger_claim_ordered_locked().
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
AS $fn$
#variable_conflict use_column
DECLARE
    ready boolean := false;
    missing_types text[];
    missing_ids uuid[];
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
    IF cardinality(missing_types) > 0 THEN
        -- in key order, as the locked path makes them; one made since is kept
        INSERT INTO /*schema*/handler_progress AS g (handler, aggregate_type, aggregate_id,
                                                     last_seq)
        SELECT claim_handler, k.t, k.a, 0
          FROM unnest(missing_types, missing_ids) WITH ORDINALITY AS k(t, a, ord)
         ORDER BY k.ord
            ON CONFLICT (handler, aggregate_type, aggregate_id) DO NOTHING;
    END IF;
    RETURN QUERY
    SELECT c.event_id, c.state, c.attempts, c.defer_ms, c.owner_token
      FROM /*schema*/ledger_claim(claim_handler, claim_ids, claim_lease_seconds,
                                  claim_lock_wait_ms, false)
           WITH ORDINALITY AS c(event_id, state, attempts, defer_ms, owner_token, ord)
     ORDER BY c.ord;
END
$fn$;
