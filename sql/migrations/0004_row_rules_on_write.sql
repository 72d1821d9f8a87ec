-- 0004_row_rules_on_write: the envelope rules run when a row's event is
-- written, not on every lease.
--
-- PostgreSQL evaluates every CHECK on every UPDATE, whichever columns it
-- sets. events_row_valid() (regexes, jsonb lookups, a PL/pgSQL call) thus
-- ran again for each lease and each finish, although neither touches the
-- event: measured, a quarter of the database's CPU while relaying. The
-- event's rules now run from a row trigger that fires on INSERT and on an
-- UPDATE that sets any of the event's columns, so a hand-written row that
-- breaks them still cannot commit, with the same SQLSTATE 23514 and rule
-- names. ENABLE ALWAYS keeps it firing under session_replication_role =
-- replica too. The state rules, which leases and finishes do change, stay
-- plain CHECKs: cheap expressions with no function call.

ALTER TABLE /*schema*/events DROP CONSTRAINT events_row_valid;

ALTER TABLE /*schema*/events
    ADD CONSTRAINT events_status_known
        CHECK (status IN ('pending', 'leased', 'done', 'dead', 'invalid')),
    ADD CONSTRAINT events_lease_complete
        CHECK (status <> 'leased' OR (lease_token IS NOT NULL AND leased_until IS NOT NULL)),
    ADD CONSTRAINT events_counts_not_negative
        CHECK (attempts >= 0 AND lease_expiries >= 0);

-- The rules of 0001's events_row_valid(), unchanged, as a trigger function:
-- one PL/pgSQL call per row (calling the old function from a trigger made
-- two, and cost a batch enqueue ~10 %). The old function is dropped below.
CREATE FUNCTION /*schema*/events_row_check() RETURNS trigger LANGUAGE plpgsql AS $fn$
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
            'data_subject', 'traceparent', 'payload'] = '{}'::jsonb
            AND envelope -> 'schema_version' = '1'::jsonb
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
            AND (envelope ->> 'data_subject') IS NOT DISTINCT FROM data_subject) THEN
        constraint_name := coalesce(constraint_name, 'events_envelope_matches_row');
        rule := coalesce(rule, 'the envelope''s id, types, aggregate_id, tenant_id and data_subject equal the row''s');
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

CREATE TRIGGER events_row_valid
    BEFORE INSERT OR UPDATE OF id, aggregate_type, aggregate_id, event_type, tenant_id,
                               data_subject, envelope
    ON /*schema*/events
    FOR EACH ROW EXECUTE FUNCTION /*schema*/events_row_check();

ALTER TABLE /*schema*/events ENABLE ALWAYS TRIGGER events_row_valid;

DROP FUNCTION /*schema*/events_row_valid(uuid, text, uuid, text, text, text, jsonb, text, integer,
                                         integer, uuid, timestamptz);
