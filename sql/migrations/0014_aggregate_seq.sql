-- 0014_aggregate_seq: each event of an ordered schema gets its aggregate's
-- next number, aggregate_seq (1, 2, 3 ... per aggregate_type and
-- aggregate_id), given at write, in the order the transactions commit.
--
-- Why a counter row and not an id or a time taken at INSERT: two
-- overlapping transactions of one aggregate can commit in the other order
-- than they inserted, so an insert-time key is insert order, not commit
-- order. Here each event upserts its aggregate's row in aggregate_heads
-- (INSERT ... ON CONFLICT DO UPDATE SET last_seq = last_seq + 1 RETURNING),
-- which locks that row until the writer's transaction ends: a second
-- transaction of the same aggregate waits for the first to commit or roll
-- back before it gets its number. Numbers are thus handed out in commit
-- order, and a rolled-back transaction gives its numbers back (its update of
-- the counter is rolled back too): no gap, no duplicate.
--
-- Every writer gets it, because a BEFORE INSERT row trigger gives it: the C
-- writer, outbox.enqueue() and enqueue_many(), and a foreign writer's plain
-- INSERT. Rows of one multi-row INSERT get their numbers in the order the
-- statement produces them (enqueue_many(): the array's order). The number
-- is written into the row (aggregate_seq) and into its envelope (the
-- "aggregate_seq" member): the envelope is what relays and consumers read.
--
-- Ordering is the schema's and lives in the database: it is on while the
-- trigger events_seq is enabled. The trigger is created disabled, so this
-- migration changes nothing for a schema until an operator runs
-- `outboxctl ordering on` (set_ordering() below). Off is the trigger's
-- absence from the write path, measured cheaper for writers than a trigger
-- that reads a settings row and returns (docs/ordering.md has the figures).
--
-- Events with no aggregate, aggregate_id = the nil UUID
-- 00000000-0000-0000-0000-000000000000 (the column is NOT NULL, so that is
-- how a writer says "none"), get no number: the trigger's WHEN clause skips
-- them without a function call, and they stay unordered.

ALTER TABLE /*schema*/events ADD COLUMN aggregate_seq bigint;

-- One row per aggregate that was ever given a number: the last one given.
-- Never emptied by pgoutbox (not by `ordering off`, not by retention), so a
-- number is never given twice, whatever is switched. Every write is an
-- update of last_seq, which no index names: HOT, so the table stays small
-- in pages; vacuumed by dead-row count like the other hot tables.
CREATE TABLE /*schema*/aggregate_heads (
    aggregate_type text   NOT NULL,
    aggregate_id   uuid   NOT NULL,
    last_seq       bigint NOT NULL CHECK (last_seq >= 1),
    PRIMARY KEY (aggregate_type, aggregate_id)
) WITH (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0.02
);

-- Writers need no right on it: the trigger's function runs as its owner.
REVOKE ALL ON /*schema*/aggregate_heads FROM PUBLIC;

-- Gives NEW its aggregate's next number, in the row and in the envelope.
--
-- SECURITY DEFINER: it runs as the schema's owner, so writers' roles
-- (outbox_writer may only INSERT into events) need no right on
-- aggregate_heads, and cannot change a counter by hand. A trigger function
-- cannot be called directly, so inserting an event is the only way in.
-- No SET search_path (a settings save and restore on every row): every
-- table is schema-qualified, and every function, operator and type is
-- pg_catalog's, named so (OPERATOR(pg_catalog.+) ...), so a caller's
-- search_path cannot put its own objects in the way.
--
-- A row that arrives with a number of its own (a dead letter written back
-- by `outboxctl dead requeue`, a copy of a row) keeps it only if the
-- counter has already given that number for the aggregate: a number never
-- given is refused (SQLSTATE 23514, rule events_aggregate_seq_given), since
-- it would leave a gap or take a later event's number. The row rule has
-- already checked that the envelope's number equals the column.
CREATE FUNCTION /*schema*/events_seq() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $fn$
DECLARE
    given bigint;
BEGIN
    IF NEW.aggregate_seq IS NULL THEN
        INSERT INTO /*schema*/aggregate_heads AS h (aggregate_type, aggregate_id, last_seq)
        VALUES (NEW.aggregate_type, NEW.aggregate_id, 1)
        ON CONFLICT (aggregate_type, aggregate_id)
        DO UPDATE SET last_seq = h.last_seq OPERATOR(pg_catalog.+) 1
        RETURNING h.last_seq INTO NEW.aggregate_seq;
    ELSE
        SELECT h.last_seq INTO given
          FROM /*schema*/aggregate_heads AS h
         WHERE h.aggregate_type OPERATOR(pg_catalog.=) NEW.aggregate_type
           AND h.aggregate_id OPERATOR(pg_catalog.=) NEW.aggregate_id;
        IF given IS NULL OR NEW.aggregate_seq OPERATOR(pg_catalog.>) given THEN
            RAISE EXCEPTION USING ERRCODE = 'check_violation',
                CONSTRAINT = 'events_aggregate_seq_given', TABLE = 'events',
                MESSAGE = pg_catalog.format('new row for relation "events" violates check constraint "%s"',
                                            'events_aggregate_seq_given'),
                DETAIL = pg_catalog.format('The rule: aggregate_seq is given by the database; a row may only carry one already given to its aggregate (%s %s: %s given, the row has %s).',
                                           NEW.aggregate_type, NEW.aggregate_id,
                                           coalesce(given, 0), NEW.aggregate_seq);
        END IF;
    END IF;
    NEW.envelope := NEW.envelope
                    OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('aggregate_seq',
                                                                          NEW.aggregate_seq);
    RETURN NEW;
END
$fn$;

-- Fires after events_row_valid (triggers of one event fire in name order),
-- so the rules have checked the row as the writer wrote it. ENABLE ALWAYS
-- when on, like the row rule: a session in replica mode writes through it.
CREATE TRIGGER events_seq
    BEFORE INSERT ON /*schema*/events
    FOR EACH ROW
    WHEN (NEW.aggregate_id <> '00000000-0000-0000-0000-000000000000'::uuid)
    EXECUTE FUNCTION /*schema*/events_seq();
ALTER TABLE /*schema*/events DISABLE TRIGGER events_seq;

-- True while ordering is on (the trigger is enabled). For the relay, the
-- consumers and outboxctl, which must all read the same answer.
CREATE FUNCTION /*schema*/ordering_on() RETURNS boolean LANGUAGE sql STABLE AS $fn$
    SELECT coalesce((SELECT t.tgenabled OPERATOR(pg_catalog.<>) 'D'
                       FROM pg_catalog.pg_trigger AS t
                      WHERE t.tgrelid OPERATOR(pg_catalog.=) '/*schema*/events'::pg_catalog.regclass
                        AND t.tgname OPERATOR(pg_catalog.=) 'events_seq'), false)
$fn$;

-- Switches ordering on or off; returns whether it was on before. For
-- `outboxctl ordering on|off` (outbox_admin may EXECUTE it: roles.sql), as
-- the owner, since only a table's owner may enable a trigger. ALTER TABLE
-- takes a lock that waits for every open transaction that wrote to events
-- and holds back new writes meanwhile, so the switch is one clean cut:
-- every row committed after it is numbered (on) or not (off), and no
-- transaction is half-numbered. lock_timeout bounds how long writers can be
-- held back behind a long open transaction: the switch fails instead
-- (SQLSTATE 55P03) and can be run again. What the switch does to rows
-- already waiting: nothing. Rows written while it was off keep no number
-- (unordered); rows numbered before it was switched off keep theirs.
CREATE FUNCTION /*schema*/set_ordering(turn_on boolean) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '3s' AS $fn$
DECLARE
    was_on boolean := /*schema*/ordering_on();
BEGIN
    IF turn_on IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'set_ordering: turn_on must be true or false';
    ELSIF turn_on THEN
        ALTER TABLE /*schema*/events ENABLE ALWAYS TRIGGER events_seq;
    ELSE
        ALTER TABLE /*schema*/events DISABLE TRIGGER events_seq;
    END IF;
    RETURN was_on;
END
$fn$;
REVOKE ALL ON FUNCTION /*schema*/set_ordering(boolean) FROM PUBLIC;

-- A database whose roles were made before this migration: its admin role
-- may switch ordering. roles.sql grants it from now on.
DO $grant$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'outbox_admin') THEN
        GRANT EXECUTE ON FUNCTION /*schema*/set_ordering(boolean) TO outbox_admin;
    END IF;
END
$grant$;

-- The row rule of 0012 with the sequence: the envelope may carry
-- aggregate_seq, a JSON number that must equal the row's column (both
-- absent, or the same whole number), and the column is at least 1. A
-- writer's own row has neither (the trigger above adds both); an UPDATE of
-- the envelope (or of aggregate_seq) must keep them equal.
CREATE OR REPLACE FUNCTION /*schema*/events_row_check() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    id uuid := NEW.id;
    aggregate_type text := NEW.aggregate_type;
    aggregate_id uuid := NEW.aggregate_id;
    event_type text := NEW.event_type;
    tenant_id text := NEW.tenant_id;
    data_subject text := NEW.data_subject;
    envelope jsonb := NEW.envelope;
    status text := NEW.status;
    attempts integer := NEW.attempts;
    lease_expiries integer := NEW.lease_expiries;
    lease_token uuid := NEW.lease_token;
    leased_until timestamptz := NEW.leased_until;
    aggregate_seq bigint := NEW.aggregate_seq;
    constraint_name text;
    rule text;
BEGIN
    IF NOT (status IN ('pending', 'leased', 'done', 'dead', 'invalid')) THEN
        constraint_name := coalesce(constraint_name, 'events_status_known');
        rule := coalesce(rule, 'status is one of pending, leased, done, dead, invalid');
    END IF;
    IF NOT (status <> 'leased' OR (lease_token IS NOT NULL AND leased_until IS NOT NULL)) THEN
        constraint_name := coalesce(constraint_name, 'events_lease_complete');
        rule := coalesce(rule, 'a leased row has a lease token and a lease end');
    END IF;
    IF NOT (attempts >= 0 AND lease_expiries >= 0) THEN
        constraint_name := coalesce(constraint_name, 'events_counts_not_negative');
        rule := coalesce(rule, 'attempts and lease_expiries are not negative');
    END IF;
    IF NOT (aggregate_type ~ '^[A-Za-z0-9_-]+$') THEN
        constraint_name := coalesce(constraint_name, 'events_aggregate_type_token');
        rule := coalesce(rule, 'aggregate_type is one token of [A-Za-z0-9_-]');
    END IF;
    IF NOT (event_type ~ '^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$') THEN
        constraint_name := coalesce(constraint_name, 'events_event_type_tokens');
        rule := coalesce(rule, 'event_type is tokens of [A-Za-z0-9_-] joined by dots');
    END IF;
    IF NOT (octet_length(aggregate_type) + 1 + octet_length(event_type) <= 222) THEN
        constraint_name := coalesce(constraint_name, 'events_route_length');
        rule := coalesce(rule, 'aggregate_type.event_type is at most 222 bytes');
    END IF;
    IF NOT (NOT starts_with(event_type, aggregate_type || '.')) THEN
        constraint_name := coalesce(constraint_name, 'events_event_type_bare');
        rule := coalesce(rule, 'event_type does not start with aggregate_type and a dot');
    END IF;
    IF NOT (tenant_id IS NULL OR (octet_length(tenant_id) BETWEEN 1 AND 128
            AND tenant_id !~ '[\x01-\x1f\x7f]')) THEN
        constraint_name := coalesce(constraint_name, 'events_tenant_id_text');
        rule := coalesce(rule, 'tenant_id is 1 to 128 bytes without control characters');
    END IF;
    IF NOT (data_subject IS NULL OR (octet_length(data_subject) BETWEEN 1 AND 256
            AND data_subject !~ '[\x01-\x1f\x7f]')) THEN
        constraint_name := coalesce(constraint_name, 'events_data_subject_text');
        rule := coalesce(rule, 'data_subject is 1 to 256 bytes without control characters');
    END IF;
    IF NOT (jsonb_typeof(envelope) = 'object'
            AND envelope ?& ARRAY['id', 'event_type', 'aggregate_type', 'aggregate_id',
            'occurred_at', 'schema_version', 'payload']
            AND envelope - ARRAY['id', 'event_type', 'aggregate_type', 'aggregate_id',
            'tenant_id', 'occurred_at', 'schema_version',
            'data_subject', 'traceparent', 'payload', 'aggregate_seq'] = '{}'::jsonb
            AND jsonb_typeof(envelope -> 'schema_version') = 'number'
            AND envelope ->> 'schema_version' = '1'
            AND jsonb_typeof(envelope -> 'payload') = 'object'
            AND jsonb_typeof(envelope -> 'occurred_at') = 'string'
            AND envelope ->> 'occurred_at'
            ~ '^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$'
            AND (NOT envelope ? 'traceparent'
            OR (jsonb_typeof(envelope -> 'traceparent') = 'string'
            AND envelope ->> 'traceparent'
            ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
            AND substr(envelope ->> 'traceparent', 4, 32) <> repeat('0', 32)
            AND substr(envelope ->> 'traceparent', 37, 16) <> repeat('0', 16)))) THEN
        constraint_name := coalesce(constraint_name, 'events_envelope_v1');
        rule := coalesce(rule, 'the envelope is a v1 object with only known keys, the required ones present, schema_version 1, an object payload, an RFC 3339 occurred_at and a W3C traceparent');
    ELSIF NOT /*schema*/time_parts_real(envelope ->> 'occurred_at') THEN
        constraint_name := coalesce(constraint_name, 'events_envelope_v1');
        rule := coalesce(rule, format('occurred_at %s is not a real date and time: month 01 to 12, a day of that month, hour 00 to 23, minute and second 00 to 59, offset -23:59 to +23:59',
                                      to_jsonb(left(envelope ->> 'occurred_at', 80))));
    END IF;
    IF NOT (jsonb_typeof(envelope -> 'id') = 'string'
            AND envelope ->> 'id' = id::text
            AND jsonb_typeof(envelope -> 'event_type') = 'string'
            AND envelope ->> 'event_type' = event_type
            AND jsonb_typeof(envelope -> 'aggregate_type') = 'string'
            AND envelope ->> 'aggregate_type' = aggregate_type
            AND jsonb_typeof(envelope -> 'aggregate_id') = 'string'
            AND envelope ->> 'aggregate_id' = aggregate_id::text
            AND coalesce(jsonb_typeof(envelope -> 'tenant_id'), 'string') = 'string'
            AND (envelope ->> 'tenant_id') IS NOT DISTINCT FROM tenant_id
            AND coalesce(jsonb_typeof(envelope -> 'data_subject'), 'string') = 'string'
            AND (envelope ->> 'data_subject') IS NOT DISTINCT FROM data_subject
            AND coalesce(jsonb_typeof(envelope -> 'aggregate_seq'), 'number') = 'number'
            AND (envelope ->> 'aggregate_seq') IS NOT DISTINCT FROM aggregate_seq::text) THEN
        constraint_name := coalesce(constraint_name, 'events_envelope_matches_row');
        rule := coalesce(rule, 'the envelope''s id, types, aggregate_id, tenant_id, data_subject and aggregate_seq equal the row''s');
    END IF;
    IF NOT (aggregate_seq IS NULL OR aggregate_seq >= 1) THEN
        constraint_name := coalesce(constraint_name, 'events_aggregate_seq_positive');
        rule := coalesce(rule, 'aggregate_seq is a whole number from 1');
    END IF;
    IF constraint_name IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = constraint_name,
            TABLE = 'events',
            MESSAGE = format('new row for relation "events" violates check constraint "%s"',
                             constraint_name),
            DETAIL = format('The rule: %s.', rule);
    END IF;
    RETURN NEW;
END
$fn$;

-- The rule's trigger of 0007, now also on an UPDATE of aggregate_seq.
DROP TRIGGER events_row_valid ON /*schema*/events;
CREATE TRIGGER events_row_valid
    BEFORE INSERT OR UPDATE OF id, aggregate_type, aggregate_id, event_type, tenant_id,
                               data_subject, envelope, aggregate_seq
    ON /*schema*/events
    FOR EACH ROW
    WHEN (current_setting('outbox.rows_validated', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION /*schema*/events_row_check();
ALTER TABLE /*schema*/events ENABLE ALWAYS TRIGGER events_row_valid;
