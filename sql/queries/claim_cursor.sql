-- claim_cursor: the first statement of a window claim's transaction. No parameters.
-- Locks the schema's cursor row, creating it when missing (a new schema,
-- or the unlogged table emptied by a crash: the first window then starts
-- from the first waiting row). Claims queue here one at a time; the
-- statements after this one take their snapshots once the lock is held,
-- so each sees every claim before it.
INSERT INTO /*schema*/relay_cursor AS c (s_lo, s_hi, pos_tx, pos_id)
VALUES (NULL, pg_current_snapshot(), '0', '00000000-0000-0000-0000-000000000000')
    ON CONFLICT (one) DO UPDATE SET one = c.one
