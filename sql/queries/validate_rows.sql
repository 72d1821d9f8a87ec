-- validate_rows: pending rows, for outboxctl validate to check the way the
-- relay will, in id order from a cursor. $1-$9: the filters
-- (src/outboxctl/cli.h; --since/--until compare created_at; $1, $7 and $9
-- are not used here); $10: the previous page's last id (NULL: the start);
-- $11: page size. Columns as lease_batch.sql's first two (id, envelope as
-- text), then what the report shows and the columns the envelope must repeat.
SELECT e.id::text AS id, e.envelope::text AS envelope, e.event_type, e.aggregate_type,
       e.created_at, e.attempts, e.aggregate_id::text AS aggregate_id, e.tenant_id,
       e.data_subject
  FROM /*schema*/events AS e
 WHERE e.status = 'pending'
   AND ($2::text IS NULL OR e.event_type = $2::text)
   AND ($3::text IS NULL OR e.aggregate_type = $3::text)
   AND ($4::uuid IS NULL OR e.aggregate_id = $4::uuid)
   AND ($5::timestamptz IS NULL OR e.created_at >= $5::timestamptz)
   AND ($6::timestamptz IS NULL OR e.created_at < $6::timestamptz)
   AND ($8::uuid[] IS NULL OR e.id = ANY ($8::uuid[]))
   AND ($10::uuid IS NULL OR e.id > $10::uuid)
 ORDER BY e.id
 LIMIT $11::bigint
