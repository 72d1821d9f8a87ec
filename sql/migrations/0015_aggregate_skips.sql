-- 0015_aggregate_skips: the parts of per-aggregate order that relays and
-- consumers both read.
--
-- An aggregate's events are published and handled in aggregate_seq order,
-- each only after its predecessor. A predecessor that can never be
-- published (a dead letter, a quarantined row) or never handled by one
-- handler (that handler's dead letter) would hold its aggregate for ever;
-- `outboxctl dead skip` records it here instead, as a gap to go past:
-- handler '' (the relay's dead letter) for relays and every handler, a
-- handler's name for that handler only. A skip is never undone by pgoutbox:
-- once consumers have gone past a number, publishing it later would break
-- the order they saw. The skipped event stays where it is (a dead letter
-- or a quarantined row), for the operator to read.
CREATE TABLE /*schema*/aggregate_skips (
    aggregate_type text        NOT NULL,
    aggregate_id   uuid        NOT NULL,
    aggregate_seq  bigint      NOT NULL CHECK (aggregate_seq >= 1),
    handler        text        NOT NULL DEFAULT '',
    event_id       uuid        NOT NULL,
    skipped_at     timestamptz NOT NULL DEFAULT now(),
    skipped_by     text        NOT NULL DEFAULT current_user,
    PRIMARY KEY (aggregate_type, aggregate_id, aggregate_seq, handler)
);
REVOKE ALL ON /*schema*/aggregate_skips FROM PUBLIC;

-- An event's predecessor, found by its aggregate and number: the relay
-- looks up the head of each aggregate it claims. No column in it changes
-- after the write, so the mark finish stays HOT; only numbered rows (an
-- ordered schema's) are in it, so unordered writers pay nothing.
CREATE INDEX events_aggregate_seq_idx
    ON /*schema*/events (aggregate_type, aggregate_id, aggregate_seq)
    WHERE aggregate_seq IS NOT NULL;

-- A database whose roles were made before this migration: relays and
-- consumers read the skips, the admin writes them (as it may every table). roles.sql grants them
-- from now on.
DO $grant$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'outbox_relay') THEN
        GRANT SELECT ON /*schema*/aggregate_skips TO outbox_relay, outbox_consumer;
        GRANT SELECT, INSERT, UPDATE, DELETE ON /*schema*/aggregate_skips TO outbox_admin;
    END IF;
END
$grant$;
