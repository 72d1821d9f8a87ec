-- 0036_ordered_claim_moves_rows_by_their_places: the ordered claim that
-- runs its events as done (claim_done: sql:, in-process handlers) moves
-- the batch's progress rows on through one function,
-- ledger_progress_move(), which finds each row by its key and writes it
-- by its place, whatever the table's statistics say.
--
-- 0027's statements that move rows it has not read yet (the common
-- batch's, the runs', and the set-back after a run broke) joined the
-- batch to handler_progress by key, and left the join's shape to the
-- planner. With statistics that put the table at a row or two while it
-- holds thousands, a join that reads the table once (a hash join, or a
-- materialized scan) costs less on paper than a probe per aggregate, and
-- each batch read the handler's every row: 19,851 rows for a batch of 50
-- aggregates over 20,000 (test_ordered_claim_plan). Such statistics are
-- ordinary: an ANALYZE that ran while the table was nearly empty, or while
-- an open snapshot kept a deleted handler's rows from being vacuumed (the
-- pages stay, the live rows counted are few), holds until autovacuum's
-- next ANALYZE of the table, a minute or more later.
--
-- ledger_progress_move() reads each row's place by a probe per aggregate
-- (LATERAL ... LIMIT 1 is a subquery per row: the planner can only probe
-- or scan the table per aggregate, and a probe always costs less), then
-- writes each place in key order (a TID scan per row; sequential and
-- bitmap scans are off in the function, so no join may scan the table
-- instead). A row another transaction moved after the probe has a new
-- place; the update follows it to the new version and the number check
-- leaves it alone, as before: the batch then takes the general path.
-- The rows the locked path and the one write move are written by the
-- places they read (a TID scan whatever the statistics), as before.
--
-- The rest of 0027's function is unchanged.

-- Moves each aggregate's progress row on from move_from to move_to where
-- it holds move_from, in key order (its lock taken by the write); where
-- move_from is 0 and the row is missing, makes it at move_to. Returns how
-- many rows it moved or made; an aggregate whose row holds another number
-- is not counted. Entries with a NULL move_to are skipped.
CREATE FUNCTION /*schema*/ledger_progress_move(move_handler text, move_types text[],
                                               move_ids uuid[], move_from bigint[],
                                               move_to bigint[])
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_bitmapscan = off
AS $fn$
DECLARE
    n bigint;
BEGIN
    -- the batch in key order, the order its rows are locked in (a
    -- materialized scan keeps it, and each nested loop keeps its outer order)
    WITH k AS MATERIALIZED (
        SELECT k.t, k.a, k.f, k.s
          FROM unnest(move_types, move_ids, move_from, move_to) AS k(t, a, f, s)
         WHERE k.s IS NOT NULL
         ORDER BY k.t, k.a
    ), moved AS (
        UPDATE /*schema*/handler_progress AS g
           SET last_seq = y.s, updated_at = now()
          FROM (SELECT k.f, k.s, p.tid
                  FROM k
                 CROSS JOIN LATERAL (
                        SELECT q.ctid AS tid
                          FROM /*schema*/handler_progress AS q
                         WHERE q.handler = move_handler AND q.aggregate_type = k.t
                           AND q.aggregate_id = k.a AND q.last_seq = k.f
                         LIMIT 1) AS p) AS y
         WHERE g.ctid = y.tid AND g.last_seq = y.f -- rechecked on a newer version
        RETURNING 1
    ), made AS (
        INSERT INTO /*schema*/handler_progress AS g (handler, aggregate_type, aggregate_id,
                                                     last_seq)
        SELECT move_handler, k.t, k.a, k.s
          FROM k
         WHERE k.f = 0
            ON CONFLICT (handler, aggregate_type, aggregate_id) DO NOTHING
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM moved) + (SELECT count(*) FROM made) INTO n;
    RETURN n;
END
$fn$;

CREATE OR REPLACE FUNCTION /*schema*/ledger_claim_ordered_locked(claim_handler text,
                                                                 claim_ids uuid[],
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
    key_types text[];            -- the batch's aggregates, sorted: the lock order
    key_ids uuid[];
    lk_types text[] := '{}';     -- the progress rows locked, and their last_seq
    lk_ids uuid[] := '{}';
    lk_done bigint[] := '{}';
    lk_tids tid[] := '{}';       -- their places, fixed while this transaction holds the locks
    more_types text[];
    more_ids uuid[];
    more_done bigint[];
    more_tids tid[];
    one_tid tid;
    moved integer;
    parked uuid[] := '{}';
    busy uuid[] := '{}';
    slow_types text[] := '{}';   -- aggregates whose prefix ends at a gap: the loop decides
    slow_ids uuid[] := '{}';
    in_run uuid[] := '{}';       -- every event let run, per aggregate in seq order
    in_run_types text[] := '{}';
    in_run_ids uuid[] := '{}';
    follows uuid[] := '{}';      -- those let run after the first of their aggregate
    undone uuid[] := '{}';       -- followers given back after the claim: parked
    move_tids tid[];             -- progress rows to move on, and where to
    move_seqs bigint[];
    move_types text[];
    move_ids uuid[];
    claim_sub uuid[];
    res_states text[];
    res_attempts integer[];
    res_defers bigint[];
    res_tokens uuid[];
    r record;
    cur_type text;
    cur_id uuid;
    done_seq bigint;
    gate_open boolean;
    run_seq bigint;              -- the last number let run in the current aggregate
    run_ord bigint;              -- its place in the batch
    one_write boolean := claim_done; -- deciding on rows read without their locks
    runs_on boolean := claim_done;   -- first, the batch as runs that follow their progress
    arrays_later boolean := false;   -- decided as runs: in_run and lk_* not built yet
    to_move integer;
    move_dones bigint[];
    early_until timestamptz;     -- a wholly early batch waits for a predecessor until then
    early_types text[];          -- its aggregates, and the number each one waits for
    early_ids uuid[];
    early_need bigint[];
    general boolean := false;    -- an aggregate comes twice: the general statement decides
    predecessor_came boolean := false; -- the early batch's wait saw an aggregate reach its number
BEGIN
    PERFORM set_config('lock_timeout', greatest(claim_lock_wait_ms, 1) || 'ms', true);
    IF NOT EXISTS (SELECT FROM /*schema*/handler_baselines AS b
                    WHERE b.handler = claim_handler) THEN
        PERFORM /*schema*/ledger_order_baseline(claim_handler);
    END IF;
    <<decide>>
    LOOP
        IF runs_on AND NOT general THEN
            -- One event per aggregate (the usual batch over many aggregates):
            -- each row moved on where it holds the number before the event's,
            -- in key order, a missing one made where the number is 1; nothing
            -- is written when an aggregate comes twice ("again": the rows are
            -- sorted by it), and the general statement below decides.
            BEGIN
                WITH y AS (
                    SELECT u.t, u.a, u.s,
                           coalesce(lag(u.t) OVER w = u.t AND lag(u.a) OVER w = u.a, false)
                               AS again
                      FROM unnest(claim_types, claim_aggregates, claim_seqs) AS u(t, a, s)
                     WHERE u.s IS NOT NULL
                    WINDOW w AS (ORDER BY u.t, u.a)
                ), one AS (
                    SELECT count(*) AS n, NOT coalesce(bool_or(y.again), false) AS apart,
                           array_agg(y.t) AS t, array_agg(y.a) AS a, array_agg(y.s - 1) AS f,
                           array_agg(y.s) AS s
                      FROM y
                )
                SELECT o.n,
                       CASE WHEN o.apart
                            THEN /*schema*/ledger_progress_move(claim_handler, o.t, o.a, o.f, o.s)
                            ELSE 0 END
                  INTO to_move, moved
                  FROM one AS o;
                IF moved > 0 AND moved < to_move THEN
                    RAISE SQLSTATE 'OB024'; -- a row elsewhere: undo, and go on below
                END IF;
            EXCEPTION
                WHEN SQLSTATE 'OB024' THEN
                    moved := 0;
                WHEN lock_not_available OR deadlock_detected THEN
                    runs_on := false;
                    one_write := false; -- decide again, under the locks
                    moved := 0;
            END;
            IF runs_on AND moved = to_move THEN
                follows := '{}';
                arrays_later := true; -- as below: built only if an event does not run
                EXIT decide;
            END IF;
            general := true;
        END IF;
        IF runs_on THEN
            -- The common batch in one statement: per aggregate, its events
            -- are the numbers right after its progress row's, one each, in
            -- batch order, the followers never claimed before. If the events
            -- say so, each row is moved on to the aggregate's last number
            -- where it holds the number before its first (a missing one is
            -- made where that first is 1), in key order, its lock taken by
            -- the write; the count says whether every aggregate's was.
            BEGIN
                WITH inp AS (
                    SELECT DISTINCT ON (u.id) u.id, u.t, u.a, u.s, u.ord
                      FROM unnest(claim_ids, claim_types, claim_aggregates, claim_seqs)
                           WITH ORDINALITY AS u(id, t, a, s, ord)
                     WHERE u.s IS NOT NULL
                     ORDER BY u.id, u.ord
                ), ev AS (
                    SELECT i.id, i.t, i.a, i.s, row_number() OVER w AS k,
                           min(i.s) OVER g AS first, max(i.s) OVER g AS last,
                           coalesce(lag(i.ord) OVER w < i.ord, true) AS later
                      FROM inp AS i
                    WINDOW w AS (PARTITION BY i.t, i.a ORDER BY i.s, i.id),
                           g AS (PARTITION BY i.t, i.a)
                ), fit AS (
                    SELECT coalesce(bool_and(e.s = e.first + e.k - 1 AND e.later
                                             AND (e.k = 1
                                                  OR NOT EXISTS (
                                                         SELECT FROM /*schema*/processed_events AS q
                                                          WHERE q.event_id = e.id
                                                            AND q.handler = claim_handler))),
                                    true) AS runs,
                           count(*) FILTER (WHERE e.k = 1) AS keys,
                           coalesce(array_agg(e.id) FILTER (WHERE e.k > 1), '{}') AS followers
                      FROM ev AS e
                ), firsts AS (
                    -- per aggregate, its row moved on from the number before
                    -- its first event to its last
                    SELECT array_agg(e.t) AS t, array_agg(e.a) AS a,
                           array_agg(e.first - 1) AS f, array_agg(e.last) AS s
                      FROM ev AS e
                     WHERE e.k = 1
                )
                SELECT f.runs, f.keys, f.followers,
                       CASE WHEN f.runs
                            THEN /*schema*/ledger_progress_move(claim_handler, m.t, m.a, m.f, m.s)
                            ELSE 0 END
                  INTO runs_on, to_move, follows, moved
                  FROM fit AS f, firsts AS m;
                IF runs_on AND moved < to_move THEN
                    -- a row at another number (or moved since it was read): undo,
                    -- and decide on the rows as they are, as below
                    RAISE SQLSTATE 'OB024';
                END IF;
            EXCEPTION
                WHEN SQLSTATE 'OB024' THEN
                    runs_on := false;
                WHEN lock_not_available OR deadlock_detected THEN
                    runs_on := false;
                    one_write := false; -- decide again, under the locks
            END;
            IF runs_on THEN
                arrays_later := true; -- built below only if an event does not run
                EXIT decide;
            END IF;
            follows := '{}';
        END IF;
        IF NOT runs_on AND key_types IS NULL THEN
            SELECT coalesce(array_agg(k.t ORDER BY k.t, k.a), '{}'),
                   coalesce(array_agg(k.a ORDER BY k.t, k.a), '{}')
              INTO key_types, key_ids
              FROM (SELECT DISTINCT u.t, u.a
                      FROM unnest(claim_types, claim_aggregates, claim_seqs) AS u(t, a, s)
                     WHERE u.s IS NOT NULL) AS k;
        END IF;
        IF one_write THEN
            -- The progress rows as they are, no lock (an index probe each:
            -- without LIMIT the planner may make the lateral a join that
            -- reads every row of the handler; a fresh handler's rows have no
            -- statistics), keeping their places for the one write below; a
            -- missing one reads 0, as it is made.
            SELECT coalesce(array_agg(k.t ORDER BY k.ord), '{}'),
                   coalesce(array_agg(k.a ORDER BY k.ord), '{}'),
                   coalesce(array_agg(coalesce(g.last_seq, 0) ORDER BY k.ord), '{}'),
                   coalesce(array_agg(g.tid ORDER BY k.ord), '{}')
              INTO lk_types, lk_ids, lk_done, lk_tids
              FROM unnest(key_types, key_ids) WITH ORDINALITY AS k(t, a, ord)
              LEFT JOIN LATERAL (
                    SELECT g.last_seq, g.ctid AS tid
                      FROM /*schema*/handler_progress AS g
                     WHERE g.handler = claim_handler AND g.aggregate_type = k.t
                       AND g.aggregate_id = k.a
                     LIMIT 1) AS g ON true;
        END IF;
        IF NOT one_write THEN
            -- Every aggregate's progress row, locked in one order (an index probe
            -- each), its last_seq read under the lock; the missing ones made, then
            -- locked the same way.
            BEGIN
                SELECT coalesce(array_agg(g.aggregate_type ORDER BY k.ord), '{}'),
                       coalesce(array_agg(g.aggregate_id ORDER BY k.ord), '{}'),
                       coalesce(array_agg(g.last_seq ORDER BY k.ord), '{}'),
                       coalesce(array_agg(g.tid ORDER BY k.ord), '{}')
                  INTO lk_types, lk_ids, lk_done, lk_tids
                  FROM unnest(key_types, key_ids) WITH ORDINALITY AS k(t, a, ord)
                 CROSS JOIN LATERAL (
                        SELECT g.aggregate_type, g.aggregate_id, g.last_seq, g.ctid AS tid
                          FROM /*schema*/handler_progress AS g
                         WHERE g.handler = claim_handler AND g.aggregate_type = k.t
                           AND g.aggregate_id = k.a
                           FOR UPDATE) AS g;
                IF cardinality(lk_types) < cardinality(key_types) THEN
                    SELECT array_agg(k.t ORDER BY k.ord), array_agg(k.a ORDER BY k.ord)
                      INTO more_types, more_ids
                      FROM unnest(key_types, key_ids) WITH ORDINALITY AS k(t, a, ord)
                     WHERE NOT EXISTS (SELECT FROM unnest(lk_types, lk_ids) AS l(t, a)
                                        WHERE l.t = k.t AND l.a = k.a);
                    INSERT INTO /*schema*/handler_progress AS g (handler, aggregate_type, aggregate_id,
                                                                 last_seq)
                    SELECT claim_handler, k.t, k.a, 0
                      FROM unnest(more_types, more_ids) WITH ORDINALITY AS k(t, a, ord)
                     ORDER BY k.ord
                        ON CONFLICT (handler, aggregate_type, aggregate_id) DO NOTHING;
                    SELECT array_agg(g.aggregate_type ORDER BY k.ord),
                           array_agg(g.aggregate_id ORDER BY k.ord),
                           array_agg(g.last_seq ORDER BY k.ord), array_agg(g.tid ORDER BY k.ord)
                      INTO more_types, more_ids, more_done, more_tids
                      FROM unnest(more_types, more_ids) WITH ORDINALITY AS k(t, a, ord)
                     CROSS JOIN LATERAL (
                            SELECT g.aggregate_type, g.aggregate_id, g.last_seq, g.ctid AS tid
                              FROM /*schema*/handler_progress AS g
                             WHERE g.handler = claim_handler AND g.aggregate_type = k.t
                               AND g.aggregate_id = k.a
                               FOR UPDATE) AS g;
                    lk_types := lk_types || more_types;
                    lk_ids := lk_ids || more_ids;
                    lk_done := lk_done || more_done;
                    lk_tids := lk_tids || more_tids;
                END IF;
            EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
                -- Undone, locks and all (the arrays are not): take them one by one,
                -- each waited for 1 ms; the held ones are busy.
                lk_types := '{}';
                lk_ids := '{}';
                lk_done := '{}';
                lk_tids := '{}';
                PERFORM set_config('lock_timeout', '1ms', true);
                FOR r IN SELECT k.t, k.a FROM unnest(key_types, key_ids) WITH ORDINALITY AS k(t, a, ord)
                          ORDER BY k.ord LOOP
                    BEGIN
                        INSERT INTO /*schema*/handler_progress AS g (handler, aggregate_type, aggregate_id,
                                                                     last_seq)
                        VALUES (claim_handler, r.t, r.a, 0)
                            ON CONFLICT (handler, aggregate_type, aggregate_id) DO NOTHING;
                        SELECT g.last_seq, g.ctid INTO done_seq, one_tid
                          FROM /*schema*/handler_progress AS g
                         WHERE g.handler = claim_handler AND g.aggregate_type = r.t
                           AND g.aggregate_id = r.a
                           FOR UPDATE;
                        lk_types := lk_types || r.t;
                        lk_ids := lk_ids || r.a;
                        lk_done := lk_done || done_seq;
                        lk_tids := lk_tids || one_tid;
                    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
                        NULL; -- held by another transaction: its events are busy
                    END;
                END LOOP;
                PERFORM set_config('lock_timeout', greatest(claim_lock_wait_ms, 1) || 'ms', true);
            END;
        END IF;
        -- The order check for every aggregate at once; a repeated id counts
        -- once. Per aggregate, its events after the progress in (seq, id)
        -- order are numbered k = 1, 2, ...; event k is in the prefix when it is
        -- done + k, and for k > 1 when it may follow in this transaction
        -- (claim_done, later in the batch than k - 1, never claimed before).
        -- The prefix runs, the rest is parked; events at or below the progress
        -- go to the plain claim. An aggregate whose prefix ends at a number
        -- past done + k (a gap skipped numbers may close) is left to the loop
        -- below; one not locked is busy.
        WITH inp AS (
            SELECT DISTINCT ON (u.id) u.id, u.t, u.a, u.s, u.ord
              FROM unnest(claim_ids, claim_types, claim_aggregates, claim_seqs)
                   WITH ORDINALITY AS u(id, t, a, s, ord)
             WHERE u.s IS NOT NULL
             ORDER BY u.id, u.ord
        ), ev AS (
            SELECT i.id, i.t, i.a, i.s, l.done, l.done IS NULL AS held,
                   row_number() OVER w AS k,
                   i.s = l.done + row_number() OVER w AS next,
                   coalesce(lag(i.ord) OVER w < i.ord, false) AS later
              FROM inp AS i
              LEFT JOIN unnest(lk_types, lk_ids, lk_done) AS l(t, a, done)
                     ON l.t = i.t AND l.a = i.a
             WHERE l.done IS NULL OR i.s > l.done
            WINDOW w AS (PARTITION BY i.t, i.a ORDER BY i.s, i.id)
        ), ok AS (
            SELECT e.*,
                   e.next AND (e.k = 1 OR (claim_done AND e.later
                                           AND NOT EXISTS (SELECT FROM /*schema*/processed_events AS q
                                                            WHERE q.event_id = e.id
                                                              AND q.handler = claim_handler)))
                       AS in_prefix
              FROM ev AS e
        ), cut AS (
            SELECT o.*, min(o.k) FILTER (WHERE NOT o.in_prefix) OVER (PARTITION BY o.t, o.a) AS cut_k
              FROM ok AS o
        ), cls AS (
            SELECT c.*,
                   coalesce(bool_or(c.k = c.cut_k AND NOT c.next AND (c.k = 1 OR claim_done)
                                    AND EXISTS (SELECT FROM /*schema*/aggregate_skips AS s
                                                 WHERE s.aggregate_type = c.t AND s.aggregate_id = c.a
                                                   AND s.handler IN ('', claim_handler)
                                                   AND s.aggregate_seq > c.done))
                                OVER (PARTITION BY c.t, c.a), false) AS slow
              FROM cut AS c
        )
        SELECT coalesce(array_agg(c.id) FILTER (WHERE c.held), '{}'),
               coalesce(array_agg(c.id) FILTER (WHERE NOT c.held AND NOT c.slow AND c.k >= c.cut_k),
                        '{}'),
               coalesce(array_agg(c.id ORDER BY c.t, c.a, c.k)
                            FILTER (WHERE NOT c.held AND NOT c.slow AND c.k < coalesce(c.cut_k, c.k + 1)),
                        '{}'),
               coalesce(array_agg(c.t ORDER BY c.t, c.a, c.k)
                            FILTER (WHERE NOT c.held AND NOT c.slow AND c.k < coalesce(c.cut_k, c.k + 1)),
                        '{}'),
               coalesce(array_agg(c.a ORDER BY c.t, c.a, c.k)
                            FILTER (WHERE NOT c.held AND NOT c.slow AND c.k < coalesce(c.cut_k, c.k + 1)),
                        '{}'),
               coalesce(array_agg(c.id)
                            FILTER (WHERE NOT c.held AND NOT c.slow AND c.k > 1
                                      AND c.k < coalesce(c.cut_k, c.k + 1)),
                        '{}'),
               coalesce(array_agg(c.t) FILTER (WHERE NOT c.held AND c.slow AND c.k = 1), '{}'),
               coalesce(array_agg(c.a) FILTER (WHERE NOT c.held AND c.slow AND c.k = 1), '{}')
          INTO busy, parked, in_run, in_run_types, in_run_ids, follows, slow_types, slow_ids
          FROM cls AS c;
        EXIT decide WHEN NOT one_write;
        IF claim_done AND cardinality(parked) > 0
           AND cardinality(parked) = (SELECT count(DISTINCT x) FROM unnest(claim_ids) AS x)
           AND (early_until IS NULL OR clock_timestamp() < early_until) THEN
            -- Every event is early: wait for a predecessor a little, reading
            -- the progress rows (no lock) every millisecond, and decide again
            -- once an aggregate has reached the number before its first.
            early_until := coalesce(early_until, clock_timestamp() + make_interval(
                                        secs => least(claim_lock_wait_ms, 100) / 1000.0));
            SELECT array_agg(u.t), array_agg(u.a), array_agg(u.s - 1)
              INTO early_types, early_ids, early_need
              FROM (SELECT e.t, e.a, min(e.s) AS s
                      FROM unnest(claim_ids, claim_types, claim_aggregates, claim_seqs)
                           AS e(id, t, a, s)
                     WHERE e.id = ANY (parked)
                     GROUP BY e.t, e.a) AS u;
            LOOP
                PERFORM pg_sleep(0.001);
                predecessor_came := EXISTS (
                    SELECT FROM unnest(early_types, early_ids, early_need) AS w(t, a, need)
                     CROSS JOIN LATERAL (
                            SELECT g.last_seq
                              FROM /*schema*/handler_progress AS g
                             WHERE g.handler = claim_handler AND g.aggregate_type = w.t
                               AND g.aggregate_id = w.a
                             LIMIT 1) AS g
                     WHERE g.last_seq >= w.need);
                EXIT WHEN predecessor_came OR clock_timestamp() >= early_until;
            END LOOP;
            -- (what was read decides, not the clock: a predecessor seen as the
            -- bound ran out still lets the batch run)
            IF predecessor_came THEN
                runs_on := true; -- decided again from the first statement
                parked := '{}';
                CONTINUE decide;
            END IF;
        END IF;
        IF cardinality(parked) + cardinality(slow_types) + cardinality(busy) = 0 THEN
            -- Every aggregate runs its next numbers: move each row on to the
            -- last of them now, its lock taken by the update, if it still holds
            -- the number read (by its place: a row another transaction moved
            -- has a new one, and is not matched).
            BEGIN
                SELECT array_agg(l.tid), array_agg(x.s), array_agg(x.t), array_agg(x.a),
                       array_agg(l.done)
                  INTO move_tids, move_seqs, move_types, move_ids, move_dones
                  FROM (SELECT r.t, r.a, max(o.s) AS s
                          FROM unnest(in_run, in_run_types, in_run_ids) AS r(id, t, a)
                          JOIN unnest(claim_ids, claim_seqs) AS o(id, s) ON o.id = r.id
                         GROUP BY r.t, r.a) AS x
                  JOIN unnest(lk_types, lk_ids, lk_done, lk_tids) AS l(t, a, done, tid)
                    ON l.t = x.t AND l.a = x.a;
                to_move := coalesce(cardinality(move_tids), 0);
                moved := 0;
                IF to_move > 0 THEN
                    UPDATE /*schema*/handler_progress AS g
                       SET last_seq = y.s, updated_at = now()
                      FROM unnest(move_tids, move_seqs, move_types, move_ids, move_dones)
                           AS y(tid, s, t, a, done)
                     WHERE g.ctid = ANY (move_tids) AND g.ctid = y.tid
                       -- the check, in a form no index answers, so the places lead the plan
                       AND (g.handler, g.aggregate_type, g.aggregate_id, g.last_seq)
                           IS NOT DISTINCT FROM (claim_handler, y.t, y.a, y.done);
                    GET DIAGNOSTICS moved = ROW_COUNT;
                    IF moved < to_move THEN
                        -- The rows missing when read are made at their new number
                        -- (an insert is its own lock); one made since is a conflict.
                        INSERT INTO /*schema*/handler_progress AS g (handler, aggregate_type,
                                                                     aggregate_id, last_seq)
                        SELECT claim_handler, y.t, y.a, y.s
                          FROM unnest(move_tids, move_seqs, move_types, move_ids)
                               AS y(tid, s, t, a)
                         WHERE y.tid IS NULL
                         ORDER BY y.t, y.a
                            ON CONFLICT (handler, aggregate_type, aggregate_id) DO NOTHING;
                        GET DIAGNOSTICS to_move = ROW_COUNT;
                        moved := moved + to_move;
                        to_move := cardinality(move_tids);
                    END IF;
                    IF moved < to_move THEN
                        RAISE SQLSTATE 'OB021'; -- a row moved since it was read: undo, decide again
                    END IF;
                END IF;
                EXIT decide;
            EXCEPTION WHEN lock_not_available OR deadlock_detected OR SQLSTATE 'OB021' THEN
                NULL;
            END;
        END IF;
        runs_on := false;
        one_write := false; -- decide again, under the locks
    END LOOP;
    -- 0017's loop, per event, for the aggregates with a gap (one pair of
    -- slow_types and slow_ids each).
    IF cardinality(slow_types) > 0 THEN
        FOR r IN SELECT o.id, o.t, o.a, o.s, o.ord
                   FROM (SELECT DISTINCT ON (u.id) u.id, u.t, u.a, u.s, u.ord
                           FROM unnest(claim_ids, claim_types, claim_aggregates, claim_seqs)
                                WITH ORDINALITY AS u(id, t, a, s, ord)
                          WHERE u.s IS NOT NULL
                          ORDER BY u.id, u.ord) AS o
                  WHERE EXISTS (SELECT FROM unnest(slow_types, slow_ids) AS w(t, a)
                                 WHERE w.t = o.t AND w.a = o.a)
                  ORDER BY o.t, o.a, o.s, o.id LOOP
            IF cur_type IS DISTINCT FROM r.t OR cur_id IS DISTINCT FROM r.a THEN
                cur_type := r.t;
                cur_id := r.a;
                gate_open := true;
                SELECT g.last_seq INTO done_seq
                  FROM /*schema*/handler_progress AS g
                 WHERE g.handler = claim_handler AND g.aggregate_type = r.t
                   AND g.aggregate_id = r.a;
                run_seq := NULL;
            END IF;
            IF r.s <= done_seq THEN
                CONTINUE; -- the plain claim decides
            ELSIF gate_open AND run_seq IS NULL
                  AND /*schema*/ledger_order_ready(claim_handler, r.t, r.a, done_seq, r.s) THEN
                run_seq := r.s; -- the first: the plain claim decides
                run_ord := r.ord;
                in_run := in_run || r.id;
                in_run_types := in_run_types || r.t;
                in_run_ids := in_run_ids || r.a;
                CONTINUE;
            ELSIF gate_open AND run_seq IS NOT NULL AND claim_done AND r.ord > run_ord
                  AND NOT EXISTS (SELECT FROM /*schema*/processed_events AS q
                                   WHERE q.event_id = r.id AND q.handler = claim_handler)
                  AND /*schema*/ledger_order_ready(claim_handler, r.t, r.a, run_seq, r.s) THEN
                run_seq := r.s; -- runs after the one before, in this transaction
                run_ord := r.ord;
                in_run := in_run || r.id;
                in_run_types := in_run_types || r.t;
                in_run_ids := in_run_ids || r.a;
                follows := follows || r.id;
                CONTINUE;
            END IF;
            gate_open := false;
            parked := parked || r.id;
        END LOOP;
    END IF;
    IF cardinality(parked) > 0 THEN
        INSERT INTO /*schema*/parked_events AS p (handler, event_id, aggregate_type, aggregate_id,
                                                  aggregate_seq, message_id, subject, envelope)
        SELECT claim_handler, u.id, u.t, u.a, u.s, coalesce(u.mid, u.id::text),
               coalesce(u.subj, ''), coalesce(u.env, '')
          FROM (SELECT DISTINCT ON (u.id) u.id, u.t, u.a, u.s, u.mid, u.subj, u.env
                  FROM unnest(claim_ids, claim_types, claim_aggregates, claim_seqs,
                              claim_message_ids, claim_subjects, claim_envelopes)
                       WITH ORDINALITY AS u(id, t, a, s, mid, subj, env, ord)
                 WHERE u.id IN (SELECT x FROM unnest(parked) AS x)
                 ORDER BY u.id, u.ord) AS u
         ORDER BY u.t, u.a, u.s
            ON CONFLICT (handler, event_id) DO UPDATE
           SET lease_token = NULL, leased_until = NULL;
    END IF;
    -- The rest through the plain claim, in input order.
    IF cardinality(parked) + cardinality(busy) = 0 THEN
        claim_sub := claim_ids;
    ELSE
        SELECT coalesce(array_agg(u.id ORDER BY u.ord), '{}') INTO claim_sub
          FROM unnest(claim_ids) WITH ORDINALITY AS u(id, ord)
         WHERE NOT (u.id = ANY (parked)) AND NOT (u.id = ANY (busy));
    END IF;
    -- (in its order: the scan WITH ORDINALITY is sorted by ord already, so
    -- ORDER BY costs nothing and each aggregate reads the rows as they come)
    SELECT array_agg(c.state), array_agg(c.attempts), array_agg(c.defer_ms),
           array_agg(c.owner_token)
      INTO res_states, res_attempts, res_defers, res_tokens
      FROM (SELECT c.state, c.attempts, c.defer_ms, c.owner_token
              FROM /*schema*/ledger_claim(claim_handler, claim_sub, claim_lease_seconds,
                                          claim_lock_wait_ms, claim_done)
                   WITH ORDINALITY AS c(event_id, state, attempts, defer_ms, owner_token, ord)
             ORDER BY c.ord) AS c;
    -- A batch decided as runs in one statement built no arrays: what the
    -- steps below read is built now if an event does not run (rare), as the
    -- locked path would have built it (every event in its run, each
    -- aggregate's progress the number before its first).
    IF arrays_later AND EXISTS (SELECT FROM unnest(res_states) AS z(state)
                                 WHERE z.state IS DISTINCT FROM 'run') THEN
        SELECT coalesce(array_agg(e.id ORDER BY e.t, e.a, e.s, e.id), '{}'),
               coalesce(array_agg(e.t ORDER BY e.t, e.a, e.s, e.id), '{}'),
               coalesce(array_agg(e.a ORDER BY e.t, e.a, e.s, e.id), '{}')
          INTO in_run, in_run_types, in_run_ids
          FROM (SELECT DISTINCT ON (u.id) u.id, u.t, u.a, u.s
                  FROM unnest(claim_ids, claim_types, claim_aggregates, claim_seqs)
                       WITH ORDINALITY AS u(id, t, a, s, ord)
                 WHERE u.s IS NOT NULL
                 ORDER BY u.id, u.ord) AS e;
        SELECT coalesce(array_agg(k.t), '{}'), coalesce(array_agg(k.a), '{}'),
               coalesce(array_agg(k.done), '{}')
          INTO lk_types, lk_ids, lk_done
          FROM (SELECT u.t, u.a, min(u.s) - 1 AS done
                  FROM unnest(claim_types, claim_aggregates, claim_seqs) AS u(t, a, s)
                 WHERE u.s IS NOT NULL
                 GROUP BY u.t, u.a) AS k;
    END IF;
    -- A follower runs only if every event before it in its run does: past
    -- the first that does not, the followers' fresh claims are given back
    -- and they are parked, to run once the one before is done. A repeated
    -- id's state is its first copy's.
    IF cardinality(follows) > 0 THEN
        SELECT coalesce(array_agg(x.id), '{}') INTO undone
          FROM (SELECT m.id, s.state, m.id = ANY (follows) AS follower,
                       bool_or(s.state IS DISTINCT FROM 'run')
                           OVER (PARTITION BY m.t, m.a ORDER BY m.pos
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS broken
                  FROM unnest(in_run, in_run_types, in_run_ids) WITH ORDINALITY AS m(id, t, a, pos)
                  LEFT JOIN (SELECT DISTINCT ON (z.id) z.id, z.state
                               FROM unnest(claim_sub, res_states) WITH ORDINALITY AS z(id, state, ord)
                              ORDER BY z.id, z.ord) AS s ON s.id = m.id) AS x
         WHERE x.follower AND x.broken AND x.state = 'run';
        IF cardinality(undone) > 0 THEN
            DELETE FROM /*schema*/processed_events AS q
             WHERE q.handler = claim_handler AND q.event_id = ANY (undone);
            INSERT INTO /*schema*/parked_events AS p (handler, event_id, aggregate_type,
                                                      aggregate_id, aggregate_seq, message_id,
                                                      subject, envelope)
            SELECT claim_handler, u.id, u.t, u.a, u.s, coalesce(u.mid, u.id::text),
                   coalesce(u.subj, ''), coalesce(u.env, '')
              FROM (SELECT DISTINCT ON (u.id) u.id, u.t, u.a, u.s, u.mid, u.subj, u.env
                      FROM unnest(claim_ids, claim_types, claim_aggregates, claim_seqs,
                                  claim_message_ids, claim_subjects, claim_envelopes)
                           WITH ORDINALITY AS u(id, t, a, s, mid, subj, env, ord)
                     WHERE u.id = ANY (undone)
                     ORDER BY u.id, u.ord) AS u
             ORDER BY u.t, u.a, u.s
                ON CONFLICT (handler, event_id) DO UPDATE
               SET lease_token = NULL, leased_until = NULL;
        END IF;
    END IF;
    -- Done moves the progress on, per aggregate to the highest number that
    -- runs now, if past the last_seq read under the lock. The rows are
    -- updated by the places read with their locks (a locked row does not
    -- move; after waiting for another transaction's update the lock reads
    -- the new version), each checked against its key. Should one not
    -- match, every row is found again by its key, one probe each (LATERAL
    -- ... LIMIT keeps it a probe: a fresh handler's progress rows have no
    -- statistics yet, and a join planned from them may read them all per
    -- aggregate).
    IF one_write THEN
        -- Moved on already, to the last of each run; set back to the last
        -- that runs where a run broke (rare).
        IF cardinality(undone) > 0
           OR EXISTS (SELECT FROM unnest(res_states) AS z(state)
                       WHERE z.state IS DISTINCT FROM 'run') THEN
            SELECT array_agg(x.t), array_agg(x.a), array_agg(x.wrote), array_agg(x.s)
              INTO move_types, move_ids, move_dones, move_seqs
              FROM (SELECT r.t, r.a, max(o.s) AS wrote,
                           coalesce(max(o.s) FILTER (WHERE z.state = 'run'
                                                       AND NOT (r.id = ANY (undone))),
                                    min(l.done)) AS s
                      FROM unnest(in_run, in_run_types, in_run_ids) AS r(id, t, a)
                      JOIN unnest(claim_ids, claim_seqs) AS o(id, s) ON o.id = r.id
                      JOIN unnest(lk_types, lk_ids, lk_done) AS l(t, a, done)
                        ON l.t = r.t AND l.a = r.a
                      LEFT JOIN (SELECT DISTINCT ON (z.id) z.id, z.state
                                   FROM unnest(claim_sub, res_states) WITH ORDINALITY
                                        AS z(id, state, ord)
                                  ORDER BY z.id, z.ord) AS z ON z.id = r.id
                     GROUP BY r.t, r.a) AS x
             WHERE x.s < x.wrote;
            PERFORM /*schema*/ledger_progress_move(claim_handler, move_types, move_ids,
                                                   move_dones, move_seqs);
        END IF;
    ELSIF claim_done THEN
        SELECT array_agg(l.tid), array_agg(x.s), array_agg(x.t), array_agg(x.a)
          INTO move_tids, move_seqs, move_types, move_ids
          FROM (SELECT o.t, o.a, max(o.s) AS s
                  FROM unnest(claim_ids, claim_types, claim_aggregates, claim_seqs)
                       AS o(id, t, a, s)
                  JOIN (SELECT DISTINCT z.id
                          FROM unnest(claim_sub, res_states) AS z(id, state)
                         WHERE z.state = 'run') AS z ON z.id = o.id
                 WHERE o.s IS NOT NULL AND NOT (o.id = ANY (undone))
                 GROUP BY o.t, o.a) AS x
          JOIN unnest(lk_types, lk_ids, lk_done, lk_tids) AS l(t, a, done, tid)
            ON l.t = x.t AND l.a = x.a
         WHERE x.s > l.done;
        IF move_tids IS NOT NULL THEN
            UPDATE /*schema*/handler_progress AS g
               SET last_seq = y.s, updated_at = now()
              FROM unnest(move_tids, move_seqs, move_types, move_ids) AS y(tid, s, t, a)
             WHERE g.ctid = ANY (move_tids) AND g.ctid = y.tid
               -- the check, in a form no index answers, so the places lead the plan
               AND (g.handler, g.aggregate_type, g.aggregate_id)
                   IS NOT DISTINCT FROM (claim_handler, y.t, y.a);
            GET DIAGNOSTICS moved = ROW_COUNT;
            IF moved < cardinality(move_tids) THEN
                SELECT array_agg(p.tid) INTO move_tids
                  FROM unnest(move_seqs, move_types, move_ids) AS y(s, t, a)
                 CROSS JOIN LATERAL (
                        SELECT q.ctid AS tid
                          FROM /*schema*/handler_progress AS q
                         WHERE q.handler = claim_handler AND q.aggregate_type = y.t
                           AND q.aggregate_id = y.a AND q.last_seq < y.s
                         LIMIT 1) AS p;
                UPDATE /*schema*/handler_progress AS g
                   SET last_seq = y.s, updated_at = now()
                  FROM unnest(move_seqs, move_types, move_ids) AS y(s, t, a)
                 WHERE g.ctid = ANY (move_tids) AND g.handler = claim_handler
                   AND g.aggregate_type = y.t AND g.aggregate_id = y.a AND g.last_seq < y.s;
            END IF;
        END IF;
    END IF;
    IF cardinality(parked) + cardinality(busy) + cardinality(undone) = 0 THEN
        -- Every event went to the plain claim (claim_sub is claim_ids): its rows as they are.
        RETURN QUERY
        SELECT u.id, u.state, u.attempts, u.defer_ms, u.owner_token
          FROM unnest(claim_ids, res_states, res_attempts, res_defers, res_tokens)
               AS u(id, state, attempts, defer_ms, owner_token);
        RETURN;
    END IF;
    RETURN QUERY
    WITH inp AS (
        SELECT u.id, u.ord, u.id = ANY (parked) AS is_parked, u.id = ANY (busy) AS is_busy,
               u.id = ANY (undone) AS is_undone
          FROM unnest(claim_ids) WITH ORDINALITY AS u(id, ord)
    ), sub AS (
        SELECT i.ord, row_number() OVER (ORDER BY i.ord) AS k
          FROM inp AS i
         WHERE NOT i.is_parked AND NOT i.is_busy
    )
    SELECT i.id,
           CASE WHEN i.is_parked OR i.is_undone THEN 'parked' WHEN i.is_busy THEN 'busy'
                ELSE res_states[s.k] END,
           CASE WHEN i.is_parked OR i.is_busy OR i.is_undone THEN 0 ELSE res_attempts[s.k] END,
           CASE WHEN i.is_parked OR i.is_undone THEN 0::bigint
                WHEN i.is_busy THEN 1000::bigint
                ELSE res_defers[s.k] END,
           CASE WHEN i.is_parked OR i.is_busy OR i.is_undone THEN NULL::uuid
                ELSE res_tokens[s.k] END
      FROM inp AS i
      LEFT JOIN sub AS s ON s.ord = i.ord
     ORDER BY i.ord;
END
$fn$;
