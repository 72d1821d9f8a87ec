-- 0006_operations: what the operator's tools (outboxctl trace, dead, replay,
-- audit, erase, subjects) need: the stream sequence of each published row, the
-- bindings of running consumers, a requeue count per dead letter and a log of
-- erasures.
--
-- Every table name is preceded by the schema marker, which the migrator
-- replaces with the quoted OUTBOX_SCHEMA. Adding nullable columns, or columns
-- with a constant default, rewrites nothing: each ALTER holds its lock for a
-- moment only.

-- The PubAck's stream sequence, set by the relay when it finishes a row as
-- published (NULL: never acked by JetStream - core NATS, the DB backend, or a
-- row finished before this migration). `outboxctl trace` fetches that message
-- and `outboxctl audit` checks the stream still holds it. Not indexed: only
-- the tools read it, and an index on it would make every finish a non-HOT
-- update.
ALTER TABLE /*schema*/events ADD COLUMN stream_seq bigint;

-- The bindings running consumers register when they start, refreshed by
-- their maintenance pass: which handler reads which subjects, in which
-- consumer group, on which backend. `outboxctl subjects` holds them against
-- what is published; a row not seen for a while belongs to a consumer that
-- stopped. The subject filter is the handler's own, or {prefix}.> for a
-- handler that sees every event.
CREATE TABLE /*schema*/handlers (
    name           text        NOT NULL,
    subject_filter text        NOT NULL,
    consumer_group text        NOT NULL,
    backend        text        NOT NULL,
    stream         text,                    -- jetstream: the stream the group reads
    replica        text,                    -- the replica that wrote the row last
    first_seen     timestamptz NOT NULL DEFAULT now(),
    last_seen      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (backend, consumer_group, name),
    CONSTRAINT handlers_name CHECK (name ~ '^[A-Za-z0-9_.-]{1,64}$'),
    CONSTRAINT handlers_backend_known CHECK (backend IN ('jetstream', 'db'))
);

-- How often a dead letter was requeued. A JetStream requeue publishes the
-- event again under the message id <event_id>:requeue:<count>, which the
-- stream's duplicate window has not seen; the ledger, keyed by the
-- envelope's id, still runs the handler once.
ALTER TABLE /*schema*/dead_letters ADD COLUMN requeue_count integer NOT NULL DEFAULT 0;

-- One row per `outboxctl erase`: when, by whom, how much. The data subject
-- itself is not kept, only its SHA-256 (hex), so a request can be matched to
-- its erasure without the log holding what was erased. stream_messages are
-- the subject's messages the stream still held (it denies deletes): they go
-- when they reach its max_age.
CREATE TABLE /*schema*/erasures (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    erased_at       timestamptz NOT NULL DEFAULT now(),
    erased_by       text        NOT NULL DEFAULT current_user,
    subject_sha256  text        NOT NULL,
    events          integer     NOT NULL,
    dead_letters    integer     NOT NULL,
    ledger_rows     integer     NOT NULL,
    stream_messages integer
);

-- The dead letters outboxctl's filters choose (`outboxctl dead list`,
-- `requeue`, `purge`), oldest first; a NULL filter takes all. f_handler ''
-- is the relay. Event type, aggregate type and id come from the kept
-- envelope, or from the outbox row when the envelope could not be kept.
-- f_waiting: only those not requeued since they died.
CREATE FUNCTION /*schema*/dead_letters_matching(f_handler text, f_event_type text,
                                                f_aggregate_type text, f_aggregate_id uuid,
                                                f_since timestamptz, f_until timestamptz,
                                                f_reason_like text, f_ids uuid[], f_limit bigint,
                                                f_waiting boolean)
RETURNS TABLE (event_id uuid, handler text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT d.event_id, d.handler
      FROM /*schema*/dead_letters AS d
      LEFT JOIN /*schema*/events AS e ON e.id = d.event_id
     WHERE (f_handler IS NULL OR d.handler = f_handler)
       AND (NOT f_waiting OR d.requeued_at IS NULL)
       AND (f_event_type IS NULL
            OR coalesce(d.envelope ->> 'event_type', e.event_type) = f_event_type)
       AND (f_aggregate_type IS NULL
            OR coalesce(d.envelope ->> 'aggregate_type', e.aggregate_type) = f_aggregate_type)
       AND (f_aggregate_id IS NULL
            OR coalesce(d.envelope ->> 'aggregate_id', e.aggregate_id::text) = f_aggregate_id::text)
       AND (f_since IS NULL OR d.dead_at >= f_since)
       AND (f_until IS NULL OR d.dead_at < f_until)
       AND (f_reason_like IS NULL OR d.reason LIKE f_reason_like)
       AND (f_ids IS NULL OR d.event_id = ANY (f_ids))
     ORDER BY d.dead_at, d.event_id, d.handler
     LIMIT f_limit
$fn$;
