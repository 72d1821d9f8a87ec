-- enqueue_one: insert one event from its envelope.
-- $1: the envelope, JSON text.
-- The columns are read from the envelope, so row and envelope cannot
-- disagree; the table's constraints check both again.
INSERT INTO /*schema*/events (id, aggregate_type, aggregate_id, event_type, tenant_id,
                              data_subject, envelope)
SELECT (e ->> 'id')::uuid, e ->> 'aggregate_type', (e ->> 'aggregate_id')::uuid,
       e ->> 'event_type', e ->> 'tenant_id', e ->> 'data_subject', e
  FROM (SELECT $1::jsonb AS e) AS input
