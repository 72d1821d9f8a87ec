-- 0013_mark_finish_is_hot: mark mode's finish stops rewriting every index.
--
-- A published row in mark mode is updated once (status done, published_at,
-- stream_seq). Every index of 0010 and 0009 named published_at or status,
-- in a key or a predicate, so that update could never be HOT: each relayed
-- event wrote a new row version elsewhere in the table, a new primary-key
-- entry, and left dead entries in every index for vacuum. With no index
-- naming a column the finish changes, the new version stays on its page,
-- no index gains an entry, and the old version is pruned from the page
-- without vacuum.
--
-- What that costs: a published row stays in events_window_idx until
-- retention deletes it. The windows never read it again (each claim starts
-- at the cursor, past every row claimed before), but a relay that lost its
-- cursor (relay_cursor is unlogged: a crash, a failover) would start over
-- from the first row of the index, done rows included. relay_floor, a
-- logged row, says where to start instead: a transaction id below every
-- row not yet published from the windows, written every few seconds by the
-- claims (claim_window.sql).

-- Rows older than 0010 have no tx; the waiting ones got one then. A waiting
-- row without one now (an INSERT that named tx as NULL) gets this
-- migration's, so the first window takes it.
UPDATE /*schema*/events SET tx = pg_current_xact_id() WHERE tx IS NULL AND published_at IS NULL;

-- Rows that came back and were then published (or are dead or invalid with a
-- past next_attempt_at) would now stay in the retries' index; the finish
-- gives published ones their created_at back from now on (finish_rows.sql),
-- and this does it for those published before.
UPDATE /*schema*/events SET next_attempt_at = created_at
 WHERE published_at IS NOT NULL AND next_attempt_at > created_at;

-- A fresh row leased by row (a relay of a release before 0010) now belongs
-- to the row lease: out of the windows, into the retries' index, due when
-- its lease runs out.
UPDATE /*schema*/events SET next_attempt_at = greatest(created_at + interval '1 microsecond',
                                                       coalesce(leased_until, now()))
 WHERE published_at IS NULL AND status <> 'pending' AND next_attempt_at <= created_at;

-- Room on each page for the new versions of all its rows: a finish marks a
-- whole batch, and the rows of a batch fill their pages side by side, so a
-- page filled past half has no room for the last of them (at 60, a quarter
-- of a batch's rows moved to other pages, with new index entries). New
-- pages only; the pages filled before keep their rows as they are.
ALTER TABLE /*schema*/events SET (fillfactor = 45);

DROP INDEX /*schema*/events_window_idx;
DROP INDEX /*schema*/events_retry_idx;
DROP INDEX /*schema*/events_off_key_order_idx;

-- The windows' index: rows in (tx, id) order, published ones too (they are
-- behind the cursor). Neither key nor predicate changes when a fresh row is
-- published.
CREATE INDEX events_window_idx ON /*schema*/events (tx, id)
    WHERE next_attempt_at <= created_at;

-- The row lease's index: rows that came back, in due order. Leased, dead
-- and invalid rows stay in it (dead and invalid at 'infinity', past every
-- lease); a published one leaves it (the finish sets next_attempt_at back
-- to created_at).
CREATE INDEX events_retry_idx ON /*schema*/events (next_attempt_at)
    WHERE next_attempt_at > created_at;

-- Retention's second arm (prune_done.sql): rows whose id is not in the key
-- range, now by creation time (a row is published after it is created, so
-- created_at bounds the same rows published_at did).
CREATE INDEX events_off_key_order_idx ON /*schema*/events (created_at)
    WHERE /*schema*/uuid_v7_after(id, created_at);

-- Where a relay without a cursor starts its first window: at or below the
-- tx of every row the windows have not yet published (the current window's
-- snapshot xmin, and the lowest tx among the rows of open claims). Logged,
-- so it outlives a crash. At creation: the lowest tx of the rows waiting now
-- (a scan of the table, once), or below every transaction running now (one
-- that has not written yet gets a later id) when none wait.
CREATE TABLE /*schema*/relay_floor (
    one        boolean     PRIMARY KEY DEFAULT true CHECK (one),
    tx         xid8        NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO /*schema*/relay_floor (tx)
SELECT least(min(tx), pg_snapshot_xmin(pg_current_snapshot())) FROM /*schema*/events
 WHERE published_at IS NULL AND next_attempt_at <= created_at;

-- Each claim keeps the lowest tx of its rows, for the floor.
ALTER TABLE /*schema*/relay_claims ADD COLUMN min_tx xid8;

DO $grant$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'outbox_relay') THEN
        GRANT SELECT, UPDATE ON /*schema*/relay_floor TO outbox_relay;
    END IF;
END
$grant$;
