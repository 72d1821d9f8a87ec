-- 0028_batch_writers_number_by_aggregate: outbox.enqueue_many() writes its
-- events sorted by aggregate, each aggregate's events in the array's order.
--
-- On an ordered schema (the default for new schemas) every event takes its
-- aggregate's counter row (aggregate_heads) until its transaction ends.
-- Two batches that share aggregates, each written in its own order, could
-- take them crosswise and deadlock (SQLSTATE 40P01, one rolled back); taken
-- in one order, the later batch waits for the earlier one's commit instead.
-- The numbers are the same (an aggregate's events keep their order in the
-- batch), and so are the ids returned (in the array's order). The rows are
-- checked before the sort, so a bad element is still named by the first
-- index that breaks a rule. The C writer's batch statement
-- (enqueue_batch.sql) sorts the same way. Unchanged otherwise (0009).

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
                                                   max_bytes) END
     -- By aggregate, each aggregate's events in the array's order (above).
     ORDER BY v.aggregate_type, v.aggregate_id::uuid, v.ord;
    PERFORM set_config('outbox.rows_validated', '', true);
    RETURN ids;
END
$fn$;
