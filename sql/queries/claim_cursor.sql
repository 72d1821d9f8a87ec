-- claim_cursor: the first statement of a window claim's transaction. No parameters.
-- Locks the schema's cursor row, creating it when missing (a new schema,
-- or the unlogged table emptied by a crash: the first window then starts
-- at the floor, relay_floor, below every row not yet published from the
-- windows, not at the first of the rows published before). Claims queue
-- here one at a time; the statements after this one take their snapshots
-- once the lock is held, so each sees every claim before it.
INSERT INTO /*schema*/relay_cursor AS c (s_lo, s_hi, pos_tx, pos_id)
SELECT NULL, pg_current_snapshot(),
       (greatest(f.tx::text::bigint - 1, 0))::text::xid8, 'ffffffff-ffff-ffff-ffff-ffffffffffff'
  FROM (SELECT coalesce((SELECT tx FROM /*schema*/relay_floor), '0') AS tx) AS f
    ON CONFLICT (one) DO UPDATE SET one = c.one
