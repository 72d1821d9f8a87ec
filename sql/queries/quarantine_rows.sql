-- quarantine_rows: the quarantined rows (status invalid) the filters
-- choose, in id order from a cursor, for outboxctl quarantine list,
-- release, purge and skip. $1-$9: the filters (src/outboxctl/cli.h; --since and
-- --until compare created_at, --reason-like the reason the relay gave;
-- $1 and $9 are not used here: the caller pages through --limit); $10: the
-- previous page's last id (NULL: the start); $11: page size; $12: with the
-- envelope (boolean; else NULL). The first two columns are as in
-- lease_batch.sql (id, envelope as text), so release checks them with the
-- relay's code; digest names the envelope checked, so a release or purge
-- leaves a row repaired again meanwhile alone. skipped: the row is a gap
-- its ordered aggregate went past (quarantine_skip.sql), never to be
-- released.
SELECT e.id::text AS id, CASE WHEN $12::boolean THEN e.envelope::text END AS envelope,
       e.aggregate_type, e.event_type, e.aggregate_id, e.created_at, e.last_error AS reason,
       e.attempts, md5(e.envelope::text) AS digest,
       e.aggregate_seq IS NOT NULL
           AND EXISTS (SELECT 1 FROM /*schema*/aggregate_skips AS k
                        WHERE k.aggregate_type = e.aggregate_type
                          AND k.aggregate_id = e.aggregate_id
                          AND k.aggregate_seq = e.aggregate_seq AND k.handler = '') AS skipped
  FROM /*schema*/events AS e
 WHERE e.status = 'invalid'
   AND ($2::text IS NULL OR e.event_type = $2::text)
   AND ($3::text IS NULL OR e.aggregate_type = $3::text)
   AND ($4::uuid IS NULL OR e.aggregate_id = $4::uuid)
   AND ($5::timestamptz IS NULL OR e.created_at >= $5::timestamptz)
   AND ($6::timestamptz IS NULL OR e.created_at < $6::timestamptz)
   AND ($7::text IS NULL OR e.last_error LIKE $7::text)
   AND ($8::uuid[] IS NULL OR e.id = ANY ($8::uuid[]))
   AND ($10::uuid IS NULL OR e.id > $10::uuid)
 ORDER BY e.id
 LIMIT $11::bigint
