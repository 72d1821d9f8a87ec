-- claim_window: claim the next fresh rows, by commit window, with no write
-- to them. Runs under the cursor lock (claim_cursor.sql).
-- $1: batch limit; $2: claim seconds; $3: holder (application_name); $4:
-- the claim's token (the lease token the finish and the extension guard
-- with), made by the relay so that claim_window_rows.sql can follow in the
-- same round trip.
-- First the rest of the current window (s_lo, s_hi]: rows visible in s_hi
-- and not in s_lo, after pos in (tx, id) order (a transaction s_lo saw
-- running has a tx below s_lo's xmax, so those come first). When fewer
-- than $1 are left, the window is done: the next one is (s_hi, this statement's
-- snapshot], and its first rows fill the batch. The cursor then records
-- where the batch stopped, and a relay_claims row the rows taken.
-- Returns only how many rows it took: the rows themselves are read after
-- the commit (claim_window_rows.sql), so the cursor lock, which every
-- other relay's claim queues for, is held while ids are chosen, not while
-- envelopes are copied and sent.
WITH cur AS MATERIALIZED (
    SELECT s_lo, s_hi, pos_tx, pos_id, pg_current_snapshot() AS s_now,
           ARRAY(SELECT pg_snapshot_xip(s_lo)) AS lo_xip,
           ARRAY(SELECT pg_snapshot_xip(s_hi)) AS hi_xip,
           -- Where the window's second part starts: past s_lo's xmax, or at
           -- pos once the claims are in it.
           CASE WHEN s_lo IS NULL OR pos_tx >= pg_snapshot_xmax(s_lo) THEN pos_tx
                ELSE (pg_snapshot_xmax(s_lo)::text::bigint - 1)::text::xid8 END AS from_tx,
           CASE WHEN s_lo IS NULL OR pos_tx >= pg_snapshot_xmax(s_lo) THEN pos_id
                ELSE 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid END AS from_id
      FROM /*schema*/relay_cursor
), rest AS MATERIALIZED (
    -- The window (s_lo, s_hi] in two parts, each an ordered index scan that
    -- stops at the limit: the transactions s_lo saw running (its xip list,
    -- looked up by tx), then those that began after it (tx >= its xmax).
    -- No part reads a row an earlier window took, however far back a long
    -- transaction holds s_lo's xmin.
    SELECT * FROM (
        (SELECT e.id, e.tx, e.aggregate_type, e.aggregate_id, e.aggregate_seq
           FROM /*schema*/events AS e
          WHERE e.published_at IS NULL AND e.next_attempt_at <= e.created_at AND e.status = 'pending'
            AND e.tx = ANY ((SELECT lo_xip FROM cur)::xid8[])
            AND (e.tx, e.id) > ((SELECT pos_tx FROM cur), (SELECT pos_id FROM cur))
            AND pg_visible_in_snapshot(e.tx, (SELECT s_hi FROM cur))
          ORDER BY e.tx, e.id
          LIMIT $1)
        UNION ALL
        (SELECT e.id, e.tx, e.aggregate_type, e.aggregate_id, e.aggregate_seq
           FROM /*schema*/events AS e
          WHERE e.published_at IS NULL AND e.next_attempt_at <= e.created_at AND e.status = 'pending'
            AND (e.tx, e.id) > ((SELECT from_tx FROM cur), (SELECT from_id FROM cur))
            AND e.tx < pg_snapshot_xmax((SELECT s_hi FROM cur))
            AND pg_visible_in_snapshot(e.tx, (SELECT s_hi FROM cur))
          ORDER BY e.tx, e.id
          LIMIT $1)
    ) AS r
     ORDER BY r.tx, r.id
     LIMIT $1
), done_with_window AS MATERIALIZED (
    SELECT count(*) < $1 AS yes FROM rest
), next AS MATERIALIZED (
    -- The next window (s_hi, this statement's snapshot], in the same two
    -- parts; what this statement sees is in its snapshot.
    SELECT * FROM (
        (SELECT e.id, e.tx, e.aggregate_type, e.aggregate_id, e.aggregate_seq
           FROM /*schema*/events AS e
          WHERE (SELECT yes FROM done_with_window) AND e.published_at IS NULL AND e.next_attempt_at <= e.created_at AND e.status = 'pending'
            AND e.tx = ANY ((SELECT hi_xip FROM cur)::xid8[])
          ORDER BY e.tx, e.id
          LIMIT $1)
        UNION ALL
        (SELECT e.id, e.tx, e.aggregate_type, e.aggregate_id, e.aggregate_seq
           FROM /*schema*/events AS e
          WHERE (SELECT yes FROM done_with_window) AND e.published_at IS NULL AND e.next_attempt_at <= e.created_at AND e.status = 'pending'
            AND e.tx >= pg_snapshot_xmax((SELECT s_hi FROM cur))
          ORDER BY e.tx, e.id
          LIMIT $1)
    ) AS n
     ORDER BY n.tx, n.id
     LIMIT $1 - (SELECT count(*) FROM rest)
), taken AS MATERIALIZED (
    SELECT 0 AS part, * FROM rest UNION ALL SELECT 1 AS part, * FROM next
), runs AS MATERIALIZED (
    -- An ordered schema's rows (a number given, migration 0014) go out only
    -- from their aggregate's head: the batch's rows of one aggregate, in
    -- aggregate_seq order, as far as they follow on from the lowest one
    -- without a gap, and only if that one's predecessor is published (or
    -- skipped, or not in the table: published and pruned). Windows take rows
    -- in (tx, id) order, which is not commit order within a window, and a
    -- batch can stop between two numbers of one aggregate: the rest wait.
    -- Each row whole, so that `out` takes them from here, not by a join
    -- back to taken (a join of two CTEs is planned from their guessed
    -- sizes: a nested loop, quadratic in the batch).
    SELECT t.*, t.aggregate_seq - first_value(t.aggregate_seq) OVER w + 1
                = row_number() OVER w AS in_run,
           first_value(t.aggregate_seq) OVER w AS first_seq,
           min(t.tx) OVER (PARTITION BY t.part, t.aggregate_type, t.aggregate_id) AS run_tx
      FROM taken AS t
     WHERE t.aggregate_seq IS NOT NULL
    WINDOW w AS (PARTITION BY t.aggregate_type, t.aggregate_id ORDER BY t.aggregate_seq)
), waiting AS MATERIALIZED (
    SELECT r.id
      FROM runs AS r
     WHERE NOT r.in_run
        -- head_waits() of migration 0016, written out: a function with a
        -- subquery is not inlined, and a call per aggregate costs ~50 us.
        OR r.first_seq > 1 AND EXISTS (
               SELECT 1
                 FROM /*schema*/events AS p
                WHERE p.aggregate_type = r.aggregate_type AND p.aggregate_id = r.aggregate_id
                  AND p.aggregate_seq = r.first_seq - 1 AND p.published_at IS NULL
                  AND NOT EXISTS (SELECT 1
                                    FROM /*schema*/aggregate_skips AS k
                                   WHERE k.aggregate_type = r.aggregate_type
                                     AND k.aggregate_id = r.aggregate_id
                                     AND k.aggregate_seq = r.first_seq - 1 AND k.handler = ''))
), parked AS (
    -- Waiting rows leave the windows for the row lease (next_attempt_at
    -- after created_at), marked as waiting for their head: a publish of an
    -- earlier number of the aggregate wakes them (wake_successors.sql), and
    -- the row lease looks again after a while in any case
    -- (head_wait_until()), so a wake-up lost in a race costs a delay, not the
    -- aggregate. No attempt is spent.
    UPDATE /*schema*/events AS e
       SET next_attempt_at = /*schema*/head_wait_until(e.created_at)
                             -- due in number order, so that the row lease takes a run whole
                             + interval '1 microsecond' * (e.aggregate_seq % 1000000),
           last_error = 'waiting_for_head'
     WHERE e.id = ANY (ARRAY(SELECT id FROM waiting)) -- by primary key, none when none wait
), out AS MATERIALIZED (
    -- The unordered rows, then the ordered ones that do not wait.
    SELECT t.*, t.tx AS run_tx
      FROM taken AS t
     WHERE t.aggregate_seq IS NULL
    UNION ALL
    SELECT r.part, r.id, r.tx, r.aggregate_type, r.aggregate_id, r.aggregate_seq, r.run_tx
      FROM runs AS r
     WHERE r.id NOT IN (SELECT id FROM waiting)
), last AS MATERIALIZED (
    -- Where the batch stopped: in the window just begun when the old one
    -- was done, else in the old one.
    SELECT tx, id FROM taken WHERE part = (SELECT yes FROM done_with_window)::integer
     ORDER BY tx DESC, id DESC LIMIT 1
), moved AS (
    -- A window just begun with nothing taken from it yet starts before its
    -- first row: (xmin - 1, the greatest uuid) sorts before every tx >= xmin.
    UPDATE /*schema*/relay_cursor AS c
       SET s_lo = CASE WHEN w.yes THEN cur.s_hi ELSE c.s_lo END,
           s_hi = CASE WHEN w.yes THEN cur.s_now ELSE c.s_hi END,
           pos_tx = coalesce((SELECT tx FROM last),
                             (pg_snapshot_xmin(cur.s_hi)::text::bigint - 1)::text::xid8),
           pos_id = coalesce((SELECT id FROM last), 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid)
      FROM cur, done_with_window AS w
), floor AS (
    -- Every few seconds, where a relay that lost the cursor must start: no
    -- row the windows have not published is below the window's xmin or the
    -- lowest tx of an open claim's rows. A first window (no s_lo) starts at
    -- the floor and leaves it.
    UPDATE /*schema*/relay_floor AS f
       SET tx = least(pg_snapshot_xmin(cur.s_lo),
                      (SELECT min(min_tx) FROM /*schema*/relay_claims)),
           written_at = now()
      FROM cur
     WHERE f.written_at < now() - interval '2 seconds' AND cur.s_lo IS NOT NULL
), claim AS (
    -- The rows in the order they go out: an aggregate's run in number
    -- order, where its first row would be (claim_window_rows.sql reads
    -- them in this order).
    INSERT INTO /*schema*/relay_claims (token, holder, ids, expires_at, min_tx)
    SELECT $4::uuid, $3,
           array_agg(id ORDER BY part, run_tx, aggregate_type, aggregate_id, aggregate_seq, tx, id),
           now() + make_interval(secs => $2), min(tx)
      FROM out
    HAVING count(*) > 0
    RETURNING cardinality(ids) AS taken
)
SELECT coalesce((SELECT taken FROM claim), 0) AS taken
