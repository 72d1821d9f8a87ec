-- replay_rows: retained (mark mode, done) rows to publish again, for outboxctl
-- replay, in id order from a cursor. $1-$9: the filters (src/outboxctl/cli.h;
-- --since/--until compare published_at; $1, $7 and $9 are not used here: the
-- caller applies --limit across pages); $10: the last id of the previous page
-- (NULL: from the start); $11: page size.
-- Columns as lease_batch.sql's first two (id, the envelope's text as the
-- relay publishes it), then no message id of its own: the event's id.
SELECT e.id::text AS id, e.envelope::text AS envelope, NULL::text AS msg_id,
       e.event_type, e.stream_seq, e.published_at
  FROM /*schema*/events AS e
 WHERE e.status = 'done'
   AND ($2::text IS NULL OR e.event_type = $2::text)
   AND ($3::text IS NULL OR e.aggregate_type = $3::text)
   AND ($4::uuid IS NULL OR e.aggregate_id = $4::uuid)
   AND ($5::timestamptz IS NULL OR e.published_at >= $5::timestamptz)
   AND ($6::timestamptz IS NULL OR e.published_at < $6::timestamptz)
   AND ($8::uuid[] IS NULL OR e.id = ANY ($8::uuid[]))
   AND ($10::uuid IS NULL OR e.id > $10::uuid)
 ORDER BY e.id
 LIMIT $11::bigint
