-- 0032_window_claim_reads_its_rows_after_commit: the window claim chooses
-- ids under the cursor lock and its rows are read after the commit.
--
-- Every relay's claim queues for the schema's cursor row (claim_cursor.sql)
-- and holds it until its transaction ends. Until now the claim statement
-- carried each row whole through its steps (about 700 bytes of envelope,
-- copied into each materialized step and sorted) and sent the batch to the
-- relay before the commit, so the next relay waited for all of that. On a
-- 2-core machine whose writers fill the CPU, a claim stalled part way held
-- the other relay for tens of milliseconds (docs/benchmarks.md).
-- Now claim_window.sql carries ids and aggregate keys only, records the
-- rows in the relay_claims row in the order they go out, under a token the
-- relay makes, and returns how many it took; after COMMIT, in the same
-- round trip, claim_window_rows.sql reads the rows by that token. The
-- claim's own time at the server is about half of what it was (500 rows:
-- 2.6-2.8 ms against 5.0-6.4 ms, EXPLAIN ANALYZE on an idle server).
--
-- Nothing else changes: the relay_claims row holds the same ids, a claim
-- still runs out and is taken over as before (claim_takeover.sql), and a
-- relay that dies between the commit and the read leaves a claim that runs
-- out, as one that dies while publishing does.
--
-- receive() (0020) takes fresh rows through relay_claim_window(), in the
-- caller's transaction. It is re-created here over the same two
-- statements, as functions whose bodies are their text (the markers, as in
-- 0020), with 0029's plan settings. 0020 keeps the text it was written
-- with, as it does for wake_successors.sql.

-- claim_window.sql: the next fresh rows, by commit window, under the cursor
-- lock, recorded under the token given; returns how many it took.
CREATE FUNCTION /*schema*/relay_claim_window_take(integer, integer, text, uuid)
RETURNS integer
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off AS $fn$
/*query:claim_window*/
$fn$;

-- claim_window_rows.sql: a window claim's rows, by its token, in the order
-- they go out.
CREATE FUNCTION /*schema*/relay_claim_window_rows(uuid)
RETURNS TABLE (id uuid, envelope text, attempts integer, lease_token uuid, quarantined boolean,
               lease_expiries integer, taken_over boolean, event_type text,
               aggregate_type text, aggregate_id text, tenant_id text, data_subject text,
               aggregate_seq bigint)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off AS $fn$
/*query:claim_window_rows*/
$fn$;

-- The next fresh rows, by commit window, under the cursor lock the caller
-- took: the claim, then its rows, two statements so that the read sees the
-- claim row.
CREATE OR REPLACE FUNCTION /*schema*/relay_claim_window(claim_limit integer,
                                                        claim_seconds integer, holder text)
RETURNS TABLE (id uuid, envelope text, attempts integer, lease_token uuid, quarantined boolean,
               lease_expiries integer, taken_over boolean, event_type text,
               aggregate_type text, aggregate_id text, tenant_id text, data_subject text,
               aggregate_seq bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    token uuid := gen_random_uuid();
BEGIN
    PERFORM /*schema*/relay_claim_window_take(claim_limit, claim_seconds, holder, token);
    RETURN QUERY SELECT * FROM /*schema*/relay_claim_window_rows(token);
END
$fn$;

REVOKE ALL ON FUNCTION /*schema*/relay_claim_window_take(integer, integer, text, uuid),
    /*schema*/relay_claim_window_rows(uuid),
    /*schema*/relay_claim_window(integer, integer, text)
    FROM PUBLIC;
