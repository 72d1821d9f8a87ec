-- 0029_receive_pins_the_relays_plans: the relay's statements that receive()
-- runs as functions (0020, 0022) get the relay's plan settings.
--
-- The relay runs these statements in a session whose plans are pinned to
-- ordered index scans (sql/queries/store_session.sql, FACTS 14): a queue
-- table spends its first minute, and every minute between autovacuum naps,
-- with statistics missing or wrong by orders of magnitude, and then the
-- planner reads the whole backlog (a bitmap scan of every entry and a sort)
-- where an ordered scan stops after the batch. receive() ran the same
-- statements in its caller's session, unpinned: over a backlog of 100,000
-- rows without statistics a receive() of 100 events read 98,601 rows of
-- events and took about 100 ms, against 201 rows and about 12 ms pinned.
--
-- Each function carries the settings itself (a SET clause holds for the
-- call only), so the caller's session, and receive()'s own statements on
-- the ledger, keep theirs. synchronous_commit and plan_cache_mode are the
-- relay session's too, but not the statements': the caller's transaction
-- commits as the caller chose, and a SQL function's statements are planned
-- per call without their parameters' values either way.
--
-- A later migration that re-creates one of these functions (CREATE OR
-- REPLACE with its /*query:NAME*/ marker, as 0022 did) replaces its
-- settings too: it must repeat these SET clauses, or a test_receive_plan
-- state fails.

ALTER FUNCTION /*schema*/relay_claim_cursor()
    SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
    SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off;
ALTER FUNCTION /*schema*/relay_claim_takeover()
    SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
    SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off;
ALTER FUNCTION /*schema*/relay_claim_window(integer, integer, text)
    SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
    SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off;
ALTER FUNCTION /*schema*/relay_lease_rows(integer, integer, integer)
    SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
    SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off;
ALTER FUNCTION /*schema*/relay_finish_rows(uuid, uuid[], text[], text[], boolean, integer,
                                           integer, integer, integer, bigint[], bigint[])
    SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
    SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off;
ALTER FUNCTION /*schema*/relay_wake_successors(text[], uuid[], bigint[], bigint, integer,
                                               integer, boolean)
    SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
    SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off;
