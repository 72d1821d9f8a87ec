-- 0001_init: the outbox, the consumer ledger, dead letters, and the SQL writer.
--
-- Every table name is preceded by the schema marker, which the migrator
-- replaces with the quoted OUTBOX_SCHEMA. The migrator has already created
-- the schema and holds the migration advisory lock.

-- Every rule a row of events must keep, in one function called by one CHECK.
-- PostgreSQL prepares each CHECK expression again for every INSERT
-- statement: eleven of them cost ~80 us per single-row enqueue, while this
-- function's plans are cached for the session (measured: 0.40 -> 0.32 ms
-- for a single-row insert). A broken rule still fails with SQLSTATE 23514
-- and its own constraint name, so errors stay as precise as separate
-- constraints. NULL passes a rule, as it passes a CHECK. No SET
-- search_path: it would cost a settings save and restore on every row, and
-- only built-in functions and operators are used, which pg_catalog resolves
-- first.
CREATE FUNCTION /*schema*/events_row_valid(id uuid, aggregate_type text, aggregate_id uuid,
                                           event_type text, tenant_id text, data_subject text,
                                           envelope jsonb, status text, attempts integer,
                                           lease_expiries integer, lease_token uuid,
                                           leased_until timestamptz)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
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
    RETURN true;
END
$fn$;

-- The outbox: one row per event. A hot queue table, so it vacuums early and
-- often (dead tuples from leasing and finishing are the real limit of a
-- PostgreSQL queue) and leaves room on each page for updates.
CREATE TABLE /*schema*/events (
    id              uuid        PRIMARY KEY,
    aggregate_type  text        NOT NULL,
    aggregate_id    uuid        NOT NULL,
    event_type      text        NOT NULL,
    tenant_id       text,
    data_subject    text,
    envelope        jsonb       NOT NULL,
    status          text        NOT NULL DEFAULT 'pending',
    attempts        integer     NOT NULL DEFAULT 0,  -- rejected publishes only
    lease_expiries  integer     NOT NULL DEFAULT 0,  -- leases that ran out with no outcome
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    leased_until    timestamptz,
    lease_token     uuid,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    published_at    timestamptz,

    -- Every rule a row must keep (status, lease, subject tokens, envelope v1,
    -- an envelope equal to the row) lives in events_row_valid() above: one
    -- CHECK, so one expression to prepare per statement.
    CONSTRAINT events_row_valid
        CHECK (/*schema*/events_row_valid(id, aggregate_type, aggregate_id, event_type, tenant_id,
                                          data_subject, envelope, status, attempts, lease_expiries,
                                          lease_token, leased_until))
) WITH (
    fillfactor = 60,                          -- room per page for a leased batch's HOT versions
    autovacuum_vacuum_scale_factor = 0,       -- vacuum by dead-row count, not table share
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0,         -- a queue table must not be throttled
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_analyze_scale_factor = 0.02
);

-- The claim's only index. Neither its key nor its predicate changes when a
-- row is leased (status, lease_token and leased_until are in no index), so
-- leasing is a HOT update that adds no index entries: it halves the cost
-- of the claim. Leased rows stay in the index and the claim steps over the
-- few in flight. Published rows leave it (published_at is set); dead and
-- invalid rows park at next_attempt_at = 'infinity', past every claim.
-- No other index may name status, or no status change could be HOT.
CREATE INDEX events_due_idx ON /*schema*/events (next_attempt_at)
    WHERE published_at IS NULL;

-- The consumer ledger: one row per (event, handler).
CREATE TABLE /*schema*/processed_events (
    event_id        uuid        NOT NULL,
    handler         text        NOT NULL,
    status          text        NOT NULL DEFAULT 'in_progress',
    owner_token     uuid,
    attempts        integer     NOT NULL DEFAULT 0,   -- handler failures only
    started_at      timestamptz NOT NULL DEFAULT now(),
    claimed_until   timestamptz,                       -- takeover after this
    next_attempt_at timestamptz,                       -- backoff after a failure
    finished_at     timestamptz,
    last_error      text,
    PRIMARY KEY (event_id, handler),
    CONSTRAINT processed_events_status_known CHECK (status IN ('in_progress', 'done')),
    CONSTRAINT processed_events_handler_name CHECK (handler ~ '^[A-Za-z0-9_.-]{1,64}$'),
    CONSTRAINT processed_events_attempts_not_negative CHECK (attempts >= 0)
) WITH (
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_analyze_scale_factor = 0.02
);

-- Dead letters for both backends: handler '' is the relay. Kept with the
-- envelope so they can be listed and requeued after the outbox row is gone.
CREATE TABLE /*schema*/dead_letters (
    event_id     uuid        NOT NULL,
    handler      text        NOT NULL DEFAULT '',
    envelope     jsonb,
    reason       text        NOT NULL,
    attempts     integer     NOT NULL DEFAULT 0,
    dead_at      timestamptz NOT NULL DEFAULT now(),
    requeued_at  timestamptz,
    PRIMARY KEY (event_id, handler)
);

-- UUIDv7 (RFC 9562) in SQL, for writers that use outbox.enqueue(): 48 bits
-- of Unix milliseconds over a random v4, with the version nibble turned
-- from 4 (0100) into 7 (0111). PostgreSQL 15 has no uuidv7() of its own.
CREATE FUNCTION /*schema*/uuid_v7(at timestamptz DEFAULT clock_timestamp())
RETURNS uuid LANGUAGE sql VOLATILE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send(floor(extract(epoch FROM at) * 1000)::bigint)
                                      FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$fn$;

-- How deep a JSON value nests ({} and [] are 1), counted only up to
-- `stop_after` + 1 so a hostile document costs no more than the limit.
CREATE FUNCTION /*schema*/jsonb_depth(doc jsonb, stop_after integer)
RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp AS $fn$
    WITH RECURSIVE walk(node, depth) AS (
        SELECT doc, 1
        UNION ALL
        SELECT child.node, walk.depth + 1
          FROM walk,
               LATERAL (SELECT value FROM jsonb_each(CASE WHEN jsonb_typeof(walk.node) = 'object'
                                                          THEN walk.node END)
                        UNION ALL
                        SELECT value FROM jsonb_array_elements(
                                             CASE WHEN jsonb_typeof(walk.node) = 'array'
                                                  THEN walk.node END)) AS child(node)
         WHERE walk.depth <= stop_after
           AND jsonb_typeof(child.node) IN ('object', 'array')
    )
    SELECT CASE WHEN jsonb_typeof(doc) IN ('object', 'array') THEN max(depth) ELSE 0 END
      FROM walk
$fn$;

-- The first rule an event breaks, worded exactly as the C writer words it,
-- or NULL when it is valid. Both writers run the same test cases.
CREATE FUNCTION /*schema*/event_error(aggregate_type text, aggregate_id text, event_type text,
                                      payload jsonb, tenant_id text, data_subject text,
                                      traceparent text)
RETURNS text LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    route_bytes integer;
BEGIN
    IF aggregate_type IS NULL THEN
        RETURN 'aggregate_type is required';
    ELSIF aggregate_type !~ '^[A-Za-z0-9_-]+$' THEN
        RETURN format('aggregate_type %s must be one token of [A-Za-z0-9_-]',
                      to_jsonb(aggregate_type));
    ELSIF event_type IS NULL THEN
        RETURN 'event_type is required';
    ELSIF event_type !~ '^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$' THEN
        RETURN format('event_type %s must be tokens of [A-Za-z0-9_-] joined by dots',
                      to_jsonb(event_type));
    END IF;
    route_bytes := octet_length(aggregate_type) + 1 + octet_length(event_type);
    IF route_bytes > 222 THEN
        RETURN format('aggregate_type.event_type is %s bytes, over the limit of 222',
                      route_bytes);
    ELSIF starts_with(event_type, aggregate_type || '.') THEN
        RETURN format('event_type %s must not start with aggregate_type %s',
                      to_jsonb(event_type), to_jsonb(aggregate_type || '.'));
    ELSIF aggregate_id IS NULL THEN
        RETURN 'aggregate_id is required';
    ELSIF aggregate_id !~ '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$' THEN
        RETURN format('aggregate_id %s is not a UUID (8-4-4-4-12 hex digits)',
                      to_jsonb(aggregate_id));
    ELSIF payload IS NULL THEN
        RETURN 'payload is required';
    ELSIF jsonb_typeof(payload) <> 'object' THEN
        RETURN format('payload must be a JSON object, not %s', jsonb_typeof(payload));
    ELSIF /*schema*/jsonb_depth(payload, 64) > 64 THEN
        RETURN 'payload is nested deeper than 64 levels';
    -- The C writer and the relay read numbers as doubles (jansson): one that
    -- rounds to infinity (|x| >= 2^1024 - 2^970) fails there, so it must fail
    -- here, or the relay would quarantine an event this function accepted.
    -- After the depth check, which bounds this walk.
    ELSIF jsonb_path_exists(payload, 'strict $.** ? (@.type() == "number" && @.abs() >= $limit)',
                            jsonb_build_object('limit', 2::numeric ^ 1024 - 2::numeric ^ 970)) THEN
        RETURN 'payload is not valid JSON: real number overflow';
    ELSIF tenant_id IS NOT NULL AND (octet_length(tenant_id) NOT BETWEEN 1 AND 128
                                     OR tenant_id ~ '[\x01-\x1f\x7f]') THEN
        RETURN format('tenant_id %s must be 1 to 128 bytes without control characters',
                      to_jsonb(tenant_id));
    ELSIF data_subject IS NOT NULL AND (octet_length(data_subject) NOT BETWEEN 1 AND 256
                                        OR data_subject ~ '[\x01-\x1f\x7f]') THEN
        RETURN format('data_subject %s must be 1 to 256 bytes without control characters',
                      to_jsonb(data_subject));
    ELSIF traceparent IS NOT NULL
          AND (traceparent !~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
               OR substr(traceparent, 4, 32) = repeat('0', 32)
               OR substr(traceparent, 37, 16) = repeat('0', 16)) THEN
        RETURN format('traceparent %s must be 00-<32 hex>-<16 hex>-<2 hex> with non-zero ids',
                      to_jsonb(traceparent));
    END IF;
    RETURN NULL;
END
$fn$;

-- The SQL writer: the same validated insert path as the C API, for psql,
-- Go, Python... Returns the new event's id. The size limit comes from the
-- setting outbox.max_envelope_bytes when set (SET, or ALTER ROLE ... SET),
-- else the default of 512 KiB. The size is measured on
-- PostgreSQL's text form of the envelope, which is a little larger than
-- the compact form the C writer measures.
CREATE FUNCTION /*schema*/enqueue(aggregate_type text, aggregate_id text, event_type text,
                                  payload jsonb, tenant_id text DEFAULT NULL,
                                  data_subject text DEFAULT NULL, traceparent text DEFAULT NULL)
RETURNS uuid LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
    at timestamptz := clock_timestamp();
    new_id uuid := /*schema*/uuid_v7(at);
    max_bytes integer := coalesce(nullif(current_setting('outbox.max_envelope_bytes', true), '')::integer,
                                  524288);
    problem text;
    envelope jsonb;
    envelope_bytes integer;
BEGIN
    problem := /*schema*/event_error(aggregate_type, aggregate_id, event_type, payload, tenant_id,
                                     data_subject, traceparent);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = problem;
    END IF;
    envelope := jsonb_build_object(
                    'id', new_id,
                    'event_type', event_type,
                    'aggregate_type', aggregate_type,
                    'aggregate_id', lower(aggregate_id),
                    'occurred_at', to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                    'schema_version', 1,
                    'payload', payload)
                || jsonb_strip_nulls(jsonb_build_object('tenant_id', tenant_id,
                                                        'data_subject', data_subject,
                                                        'traceparent', traceparent));
    envelope_bytes := octet_length(envelope::text);
    IF envelope_bytes > max_bytes THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('envelope is %s bytes, over the limit of %s', envelope_bytes, max_bytes);
    END IF;
    INSERT INTO /*schema*/events (id, aggregate_type, aggregate_id, event_type, tenant_id,
                                  data_subject, envelope)
    VALUES (new_id, aggregate_type, aggregate_id::uuid, event_type, tenant_id, data_subject,
            envelope);
    RETURN new_id;
END
$fn$;

-- The same for callers that hold the aggregate id as a uuid value.
CREATE FUNCTION /*schema*/enqueue(aggregate_type text, aggregate_id uuid, event_type text,
                                  payload jsonb, tenant_id text DEFAULT NULL,
                                  data_subject text DEFAULT NULL, traceparent text DEFAULT NULL)
RETURNS uuid LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT /*schema*/enqueue($1, $2::text, $3, $4, $5, $6, $7)
$fn$;
