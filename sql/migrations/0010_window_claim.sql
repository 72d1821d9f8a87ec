-- 0010_window_claim: the relay claims fresh rows by commit windows, with
-- no write per row, so a relayed event costs PostgreSQL one write (the
-- prune's delete or the mark's update) instead of two.
--
-- A window is the rows whose transaction committed between two snapshots
-- the relays took (PgQ's batches): visible in the later snapshot, not in
-- the earlier one. Every writer's row carries its transaction's id (tx,
-- the default, so a foreign writer's plain INSERT has it too), and a row
-- committed late with an old id or time is in the window of its commit:
-- no row is ever passed over, whatever order ids and commits come in.
-- One cursor row per schema says which window the relays are in and how
-- far through it (relay_cursor); each claim locks it, takes the next rows
-- of the window in (tx, id) order, and records them in a claim row
-- (relay_claims) that its finish deletes in the statement that deletes or
-- marks the rows. A claim whose holder died runs out at expires_at; the
-- next claim gives its rows back, charged one lease expiry.
--
-- Rows that come back (a failed publish's retry, a release, a claim run
-- out, a requeue) leave the windows for good: their next_attempt_at is set
-- after their created_at, and the row lease of 0002 (lease_batch.sql)
-- takes them when due, from events_retry_idx. A fresh row has
-- next_attempt_at = created_at (both now() at insert), so the two paths
-- never hold the same row.
--
-- Both tables are UNLOGGED: a claim is soft state. After a crash or a
-- failover they are empty, the first claim starts a window over every
-- waiting row, and what was in flight is published again under its
-- Nats-Msg-Id, which JetStream's duplicate window drops.

-- Rows written before this migration have no tx; the waiting ones get
-- this migration's, so the first window takes them. Published rows keep
-- NULL (they are in no claim's index). Adding the column without a
-- default first keeps the table from being rewritten.
ALTER TABLE /*schema*/events ADD COLUMN tx xid8;
ALTER TABLE /*schema*/events ALTER COLUMN tx SET DEFAULT pg_current_xact_id();
UPDATE /*schema*/events SET tx = pg_current_xact_id() WHERE published_at IS NULL;

-- The windows' index: fresh waiting rows in (tx, id) order. Neither key
-- changes after insert, so the row lease's updates stay HOT.
CREATE INDEX events_window_idx ON /*schema*/events (tx, id)
    WHERE published_at IS NULL AND next_attempt_at <= created_at;

-- The row lease's index: rows that came back, in due order, and any row
-- not pending (leased, dead, invalid): a lease taken by a relay of an
-- earlier release, even on a fresh row, is taken over from here when it
-- runs out. Naming status makes a row lease's update not HOT, which only
-- rows that came back pay.
CREATE INDEX events_retry_idx ON /*schema*/events (next_attempt_at)
    WHERE published_at IS NULL AND (next_attempt_at > created_at OR tx IS NULL
                                         OR status <> 'pending');

CREATE UNLOGGED TABLE /*schema*/relay_cursor (
    one     boolean     PRIMARY KEY DEFAULT true CHECK (one),
    s_lo    pg_snapshot,                -- the window's start; NULL: from the first row
    s_hi    pg_snapshot NOT NULL,       -- its end
    pos_tx  xid8        NOT NULL,       -- the last row claimed from it, in (tx, id) order
    pos_id  uuid        NOT NULL
);

CREATE UNLOGGED TABLE /*schema*/relay_claims (
    token      uuid        PRIMARY KEY,  -- the lease token the relay finishes with
    holder     text        NOT NULL,     -- application_name of the claiming session
    ids        uuid[]      NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

-- Every claim looks for claims run out (claim_takeover.sql). A claim row
-- lives a few milliseconds and leaves a dead tuple behind, and between
-- autovacuum naps those pile up by the thousand; read by expires_at, the
-- look reads the run-out ones only, not the whole heap of dead claims.
CREATE INDEX relay_claims_expires_idx ON /*schema*/relay_claims (expires_at);

-- A database whose roles were made before this migration (outboxctl roles)
-- lets its relay role use the new tables; roles.sql grants them from now on.
DO $grant$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'outbox_relay') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON /*schema*/relay_cursor, /*schema*/relay_claims
            TO outbox_relay;
    END IF;
END
$grant$;
