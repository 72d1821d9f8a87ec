-- enqueue_batch: insert many events in one statement and one round trip.
-- $1: a JSON array of envelopes.
INSERT INTO /*schema*/events (id, aggregate_type, aggregate_id, event_type, tenant_id,
                              data_subject, envelope)
SELECT (e ->> 'id')::uuid, e ->> 'aggregate_type', (e ->> 'aggregate_id')::uuid,
       e ->> 'event_type', e ->> 'tenant_id', e ->> 'data_subject', e
  FROM jsonb_array_elements($1::jsonb) AS e
