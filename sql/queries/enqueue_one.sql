-- enqueue_one: insert one event.
-- $1 id, $2 aggregate_type, $3 aggregate_id, $4 event_type, $5 tenant_id,
-- $6 data_subject (both may be NULL), $7 the envelope (JSON text).
-- The writer serialized the envelope from these same fields; the table's
-- trigger (events_row_valid) proves again that row and envelope agree.
INSERT INTO /*schema*/events (id, aggregate_type, aggregate_id, event_type, tenant_id,
                              data_subject, envelope)
VALUES ($1::uuid, $2, $3::uuid, $4, $5, $6, $7::jsonb)
