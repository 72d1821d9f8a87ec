-- events_envelopes: retained rows to publish again by id (outboxctl audit
-- --repair). $1: ids (uuid[]). Columns as lease_batch.sql's first two.
SELECT e.id::text AS id, e.envelope::text AS envelope, NULL::text AS msg_id
  FROM /*schema*/events AS e
 WHERE e.id = ANY ($1::uuid[]) AND e.status = 'done'
 ORDER BY e.id
