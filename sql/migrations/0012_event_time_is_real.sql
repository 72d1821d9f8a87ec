-- 0012_event_time_is_real: a hand-written row's occurred_at must name a
-- real instant, not only have the digits' pattern.
--
-- The row rule checked occurred_at against a pattern of digits, so
-- 2026-02-30T10:00:00Z, hour 24, month 13 or an offset of +99:99 committed
-- and were published as ce-time, where every reader moves them somewhere
-- else (PostgreSQL and JavaScript's Date roll Feb 30 to Mar 2 and hour 24
-- to the next day; the CloudEvents SDK for JavaScript puts a month 13 at
-- now). Such a row is now refused with the same SQLSTATE 23514 and rule
-- name (events_envelope_v1), its DETAIL quoting the value. The relay
-- checks the same in C (src/envelope/fields.c) and quarantines a row that
-- got past this rule through the writers' bypass. Rows already in the
-- table are not checked again by this migration: a pending one with such a
-- time is quarantined by the relay when it comes to it.
--
-- The writers are unchanged: outbox.enqueue() and outbox.enqueue_many()
-- write the database clock's time, so their rows are real and skip the
-- trigger as before. The check costs only rows the trigger checks (the C
-- writer's and hand-written ones): substrings and integer comparisons in an
-- inlined SQL function, after the pattern the rule already matched; no
-- cast to timestamptz (it takes hour 24 and second 60, and raises instead
-- of naming the rule) and no exception block (a PL/pgSQL EXCEPTION clause
-- opens a subtransaction per row).

-- True when `t`, text with the RFC 3339 pattern of the row rule
-- (YYYY-MM-DDTHH:MM:SS, a fraction or none, then Z, +HH:MM or -HH:MM), names a real instant:
-- month 01-12, a day of that month (proleptic Gregorian, as RFC 3339),
-- hour 00-23, minute and second 00-59 (a leap second 60 is refused:
-- PostgreSQL moves it to the next minute and JavaScript refuses it), an
-- offset of at most 23:59. Text without the pattern may raise (22P02):
-- the row rule calls it only once the pattern has matched, so the regex,
-- the dearer part (measured 5 us against 2-3 us for these comparisons on
-- a loaded 2-core machine), runs once per row. LANGUAGE sql and IMMUTABLE
-- without SET, so it is inlined into its caller.
CREATE FUNCTION /*schema*/time_parts_real(t text)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT substr($1, 6, 2)::integer BETWEEN 1 AND 12
           AND substr($1, 9, 2)::integer BETWEEN 1 AND
               CASE substr($1, 6, 2)::integer
                   WHEN 2 THEN CASE WHEN substr($1, 1, 4)::integer % 4 = 0
                                         AND (substr($1, 1, 4)::integer % 100 <> 0
                                              OR substr($1, 1, 4)::integer % 400 = 0)
                                    THEN 29 ELSE 28 END
                   WHEN 4 THEN 30 WHEN 6 THEN 30 WHEN 9 THEN 30 WHEN 11 THEN 30
                   ELSE 31 END
           AND substr($1, 12, 2)::integer <= 23
           AND substr($1, 15, 2)::integer <= 59
           AND substr($1, 18, 2)::integer <= 59
           AND (right($1, 1) = 'Z'
                OR (substr(right($1, 5), 1, 2)::integer <= 23
                    AND right($1, 2)::integer <= 59))
$fn$;

-- The same for any text: false when `t` lacks the pattern; NULL for NULL.
-- The CASE keeps the casts from running on text without the pattern.
CREATE FUNCTION /*schema*/time_is_real(t text)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT CASE
        WHEN $1 !~ '^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$' THEN false
        ELSE /*schema*/time_parts_real($1)
    END
$fn$;

-- 0009's row rule, with occurred_at's real-instant check after the
-- envelope's shape: an ELSIF, so it runs only once the pattern has matched.
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
