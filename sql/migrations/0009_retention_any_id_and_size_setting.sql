-- 0009_retention_any_id_and_size_setting: retention reaches every row,
-- whatever its id; outbox.max_envelope_bytes is checked like the C
-- writer's setting; the row rule reads schema_version as an integer.
--
-- Retention. prune_done and ledger_prune scan the primary key below the
-- UUIDv7 of (now - retention): ids are time-ordered, so the rows old
-- enough are a key range and no index on a time column is needed. An id
-- that claims a later time than the row's own is never in that range in
-- time: a foreign writer's gen_random_uuid() (v4: its first 48 bits read
-- as a time up to the year 10889, past 2026 for 99.4 % of them), or a v7
-- stamped in the future by a wrong clock or by hand. Such rows were
-- published, then kept forever. The indexes below hold exactly those rows,
-- ordered by a time that pgoutbox itself writes from the database's clock
-- (published_at when the relay publishes, started_at when a consumer
-- claims), so the prune reads them in that order and stops at the first
-- row not yet due. A row whose id is at most 5 minutes ahead of that time
-- (a writer's clock a little fast) stays out of them: the key-range scan
-- reaches it at most 5 minutes late.
--
-- Neither index costs the hot path an update that was HOT: the outbox's
-- predicate reads id and published_at, which only the finish and a
-- requeue write (already not HOT: events_due_idx's predicate reads
-- published_at); the ledger's reads event_id and started_at, which a
-- mark-done does not touch (only a claim's takeover rewrites started_at).
-- A writer's id that is a true UUIDv7 adds no entry.
--
-- Building each index reads its whole table once under a lock that
-- stops writes to it (a migration runs in a transaction, so CONCURRENTLY
-- is not possible): measured on a loaded 2-core machine, 4.7 s for 1.2
-- million outbox rows, 1.8 s for 700,000 ledger rows. The predicate costs
-- a finish or a claim about 0.2 us a row.

-- The time a UUIDv7 says (its first 48 bits, Unix milliseconds) is more
-- than 5 minutes after `at`: a key the retention's key-range scan reaches
-- late or never. Read from any uuid, whatever its version. Only built-in
-- immutable functions, so it is inlined into the index predicates below
-- and into the queries that must match them. NULL `at`: NULL.
CREATE FUNCTION /*schema*/uuid_v7_after(id uuid, at timestamptz)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT to_timestamp((('x' || translate(left($1::text, 13), '-', ''))::bit(48)::bigint
                         - 300000)::double precision / 1000) > $2
$fn$;

CREATE INDEX events_off_key_order_idx ON /*schema*/events (published_at)
    WHERE /*schema*/uuid_v7_after(id, published_at);

CREATE INDEX processed_events_off_key_order_idx ON /*schema*/processed_events (started_at)
    WHERE /*schema*/uuid_v7_after(event_id, started_at);

-- The size setting. The writers read outbox.max_envelope_bytes (SET, SET
-- LOCAL, ALTER ROLE ... SET) with a bare cast: 'abc' failed every call
-- with 22P02 naming no setting, 0 or -1 refused every event, and
-- 2000000000 let through events the relay then quarantines as larger than
-- the broker takes. It now has the C writer's bounds, 1024 to 67108864
-- (OUTBOX_MAX_ENVELOPE_BYTES), and a value outside them, or not a whole
-- number, is refused with SQLSTATE 22023 and a message naming the setting
-- and the value. Unset or empty is the default, 524288, with no parse;
-- a set value costs one regex match. Measured per evaluation: unset 1.1 us
-- before, 2.5 us now; set 1.2 us before, 5.6 us now; an enqueue() call
-- takes about 180 us on the same machine.

-- Words the refusal of a bad setting. Only on the error path. STABLE (it
-- writes nothing), so max_envelope_bytes() below is still inlined.
CREATE FUNCTION /*schema*/max_envelope_bytes_refuse(setting text)
RETURNS integer LANGUAGE plpgsql STABLE AS $fn$
BEGIN
    RAISE EXCEPTION USING ERRCODE = '22023',
        MESSAGE = format('outbox.max_envelope_bytes=%s must be a whole number from 1024 to 67108864',
                         to_jsonb(left(setting, 80))),
        HINT = 'SET outbox.max_envelope_bytes to a size in bytes, or RESET it for the default of 524288.';
END
$fn$;

-- The envelope size limit the setting's text `setting` gives (pass
-- current_setting('outbox.max_envelope_bytes', true)). A SQL CASE, so each
-- branch runs only when the ones before it did not match: the cast only
-- after the regex. At most 10 digits, so the bigint cast never overflows;
-- blanks and a + are what the C writer's strtoll() takes too.
CREATE FUNCTION /*schema*/max_envelope_bytes(setting text)
RETURNS integer LANGUAGE sql STABLE AS $fn$
    SELECT CASE WHEN $1 IS NULL OR $1 = '' THEN 524288
                WHEN $1 !~ '^\s*\+?[0-9]{1,10}\s*$' THEN /*schema*/max_envelope_bytes_refuse($1)
                WHEN $1::bigint NOT BETWEEN 1024 AND 67108864
                    THEN /*schema*/max_envelope_bytes_refuse($1)
                ELSE $1::integer END
$fn$;

-- The writers of 0007, unchanged but for the limit, read through it.
CREATE OR REPLACE FUNCTION /*schema*/enqueue(aggregate_type text, aggregate_id text,
                                             event_type text, payload jsonb,
                                             tenant_id text DEFAULT NULL,
                                             data_subject text DEFAULT NULL,
                                             traceparent text DEFAULT NULL)
RETURNS uuid LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_variable
DECLARE
    at timestamptz := clock_timestamp();
    new_id uuid;
    envelope jsonb;
    envelope_bytes integer;
    max_bytes integer;
BEGIN
    IF NOT /*schema*/event_ok(aggregate_type, aggregate_id, event_type, payload, tenant_id,
                              data_subject, traceparent) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = coalesce(/*schema*/event_error(aggregate_type, aggregate_id, event_type,
                                                     payload, tenant_id, data_subject,
                                                     traceparent),
                               'the event breaks a rule event_error() does not name');
    END IF;
    new_id := /*schema*/uuid_v7(at);
    envelope := /*schema*/event_envelope(new_id,
                                         to_char(at AT TIME ZONE 'UTC',
                                                 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                                         aggregate_type, aggregate_id, event_type,
                                         payload, tenant_id, data_subject, traceparent);
    -- One expression on the way through (each costs a set-up per transaction).
    IF octet_length(envelope::text)
       > /*schema*/max_envelope_bytes(current_setting('outbox.max_envelope_bytes', true)) THEN
        envelope_bytes := octet_length(envelope::text);
        max_bytes := /*schema*/max_envelope_bytes(current_setting('outbox.max_envelope_bytes',
                                                                  true));
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('envelope is %s bytes, over the limit of %s', envelope_bytes, max_bytes);
    END IF;
    PERFORM set_config('outbox.rows_validated', 'on', true);
    INSERT INTO /*schema*/events (id, aggregate_type, aggregate_id, event_type, tenant_id,
                                  data_subject, envelope)
    VALUES (new_id, aggregate_type, aggregate_id::uuid, event_type, tenant_id, data_subject,
            envelope);
    PERFORM set_config('outbox.rows_validated', '', true);
    RETURN new_id;
END
$fn$;

CREATE OR REPLACE FUNCTION /*schema*/enqueue_many(events jsonb)
RETURNS uuid[] LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan AS $fn$
#variable_conflict use_variable
DECLARE
    at timestamptz := clock_timestamp();
    max_bytes integer := /*schema*/max_envelope_bytes(current_setting('outbox.max_envelope_bytes',
                                                                       true));
    occurred_at text := to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
    n integer;
    ids uuid[];
BEGIN
    IF events IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'events is required';
    ELSIF jsonb_typeof(events) <> 'array' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('events must be a JSON array, not %s', jsonb_typeof(events));
    END IF;
    n := jsonb_array_length(events);
    IF n = 0 THEN
        RETURN '{}'::uuid[];
    END IF;
    -- Sorted: the ids ascend with the array's index.
    SELECT array_agg(g.id ORDER BY g.id) INTO ids
      FROM (SELECT /*schema*/uuid_v7(at) AS id FROM generate_series(1, n)) AS g;
    PERFORM set_config('outbox.rows_validated', 'on', true);
    -- OFFSET 0 keeps each level a subquery of its own, so each field is
    -- read out of the element once, not once per reference.
    INSERT INTO /*schema*/events (id, aggregate_type, aggregate_id, event_type, tenant_id,
                                  data_subject, envelope)
    SELECT v.id, v.aggregate_type, v.aggregate_id::uuid, v.event_type, v.tenant_id,
           v.data_subject, v.envelope
      FROM (SELECT f.*,
                   /*schema*/event_envelope(f.id, occurred_at, f.aggregate_type, f.aggregate_id,
                                            f.event_type, f.payload, f.tenant_id,
                                            f.data_subject, f.traceparent) AS envelope
              FROM (SELECT t.ord, ids[t.ord] AS id, t.e,
                           t.e ->> 'aggregate_type' AS aggregate_type,
                           t.e ->> 'aggregate_id' AS aggregate_id,
                           t.e ->> 'event_type' AS event_type,
                           t.e -> 'payload' AS payload,
                           t.e ->> 'tenant_id' AS tenant_id,
                           t.e ->> 'data_subject' AS data_subject,
                           t.e ->> 'traceparent' AS traceparent
                      FROM jsonb_array_elements(events) WITH ORDINALITY AS t(e, ord)
                    OFFSET 0) AS f
            OFFSET 0) AS v
     WHERE CASE WHEN jsonb_typeof(v.e) = 'object'
                     -- Only known fields (removing them leaves nothing; the
                     -- payload is not unpacked for this), the text ones
                     -- strings or null (.type() does not unwrap arrays).
                     AND v.e - '{aggregate_type,aggregate_id,event_type,payload,tenant_id,data_subject,traceparent}'::text[] = '{}'::jsonb
                     AND NOT jsonb_path_exists(v.e, 'lax $ ? ((@.aggregate_type.type() != "string" && @.aggregate_type.type() != "null") || (@.aggregate_id.type() != "string" && @.aggregate_id.type() != "null") || (@.event_type.type() != "string" && @.event_type.type() != "null") || (@.tenant_id.type() != "string" && @.tenant_id.type() != "null") || (@.data_subject.type() != "string" && @.data_subject.type() != "null") || (@.traceparent.type() != "string" && @.traceparent.type() != "null"))')
                     AND /*schema*/event_ok(v.aggregate_type, v.aggregate_id, v.event_type,
                                            v.payload, v.tenant_id, v.data_subject,
                                            v.traceparent)
                     AND octet_length(v.envelope::text) <= max_bytes
                THEN true
                ELSE /*schema*/enqueue_many_refuse(v.ord - 1, v.e, octet_length(v.envelope::text),
                                                   max_bytes) END;
    PERFORM set_config('outbox.rows_validated', '', true);
    RETURN ids;
END
$fn$;

-- The row rule reads schema_version as written: jsonb compares numbers by value,
-- so 1.0 equalled 1, passed, and was published as 1.0, which a consumer decoding
-- an integer refuses. Its text is "1" only for the integer (1e0 is stored as 1).
-- Otherwise 0004's function, unchanged.
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
