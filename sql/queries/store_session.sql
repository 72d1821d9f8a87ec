-- store_session: the relay's (and the DB feed's) session settings. No parameters.
--
-- synchronous_commit off: safe for these sessions only. A lease lost in a
-- database crash makes its rows due again, and a lost finish leaves them
-- leased until the lease runs out; either way they are published again
-- under the same Nats-Msg-Id, and JetStream's duplicate window drops the
-- copy. Events themselves are made durable by the writers' own commits.
-- The consumer ledger keeps synchronous commits: a lost `done` would run
-- an external handler twice. Each lease and finish rewrites ~1 KB of WAL
-- per row, so not waiting for its flush is most of the relay's database
-- time on a slow disk.
--
-- The plan of every statement here is pinned to index scans: a queue
-- table spends its first minute, and every minute between autovacuum naps,
-- with statistics that are missing or wrong by orders of magnitude, and
-- then the planner picks a bitmap scan of the whole claim index plus a
-- top-N sort (77 ms a lease, FACTS 14) where an ordered scan of the
-- claim's index stops after the batch. Every statement of these sessions
-- finds its rows by an index (the window claim by events_window_idx in
-- (tx, id) order, the row lease by events_retry_idx in due order,
-- finishes by the primary key, pruning by a primary-key range), so no
-- sequential scan, bitmap scan or explicit sort is ever the better plan
-- for them; `off` only makes such a plan the last resort. jit off: the
-- penalty these settings add to a plan's cost would otherwise pass
-- jit_above_cost and compile every lease (tens of ms each).
-- Joins are pinned to nested loops over an index for the same reason:
-- a generic plan cannot see the LIMIT $1 and plans for 10% of the table,
-- and with statistics it then hashed the whole primary key (20,000 rows
-- read for a 100-row lease: 12 ms instead of 1).
-- plan_cache_mode force_generic_plan: the session's statements are
-- prepared once per connection (pg_session_pg.c) and planned once, with
-- those settings, for every state of the table; a custom plan per call
-- would re-plan the lease's CTE each time (the planner keeps custom plans
-- for a LIMIT $1 it cannot see, so `auto` never stops planning it).
-- tests/integration/store/test_lease_plan.c checks the shape in each
-- state the table reaches, by EXPLAIN EXECUTE of that prepared statement.
SELECT set_config('synchronous_commit', 'off', false),
       set_config('enable_seqscan', 'off', false),
       set_config('enable_bitmapscan', 'off', false),
       set_config('enable_sort', 'off', false),
       set_config('enable_hashjoin', 'off', false),
       set_config('enable_mergejoin', 'off', false),
       set_config('jit', 'off', false),
       set_config('plan_cache_mode', 'force_generic_plan', false)
