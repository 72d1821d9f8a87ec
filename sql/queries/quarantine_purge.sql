-- quarantine_purge: delete quarantined rows, for outboxctl quarantine
-- purge. $1: ids (uuid[]), as quarantine_rows.sql listed them; $2: the
-- digest of each envelope as listed (text[], same order): a row repaired
-- or released since is left alone (no row returned). The events are gone
-- for good: no dead letter keeps them.
-- An ordered event (it has an aggregate_seq) not yet skipped as a gap of
-- its aggregate (quarantine_skip.sql) is refused and kept: consumers wait
-- for its number, and with the row gone no verb could skip it, so its
-- aggregate's later events would wait forever. The check is here, under
-- the row's lock, so a skip listed a moment ago cannot be undone in
-- between. Returns one row per row chosen: id, aggregate_type,
-- aggregate_id, aggregate_seq, purged (false: refused, kept).
WITH chosen AS MATERIALIZED (
    SELECT e.id, e.aggregate_type, e.aggregate_id, e.aggregate_seq,
           e.aggregate_seq IS NULL
           OR EXISTS (SELECT 1 FROM /*schema*/aggregate_skips AS k
                       WHERE k.aggregate_type = e.aggregate_type
                         AND k.aggregate_id = e.aggregate_id
                         AND k.aggregate_seq = e.aggregate_seq AND k.handler = '') AS purgeable
      FROM /*schema*/events AS e
      JOIN unnest($1::uuid[], $2::text[]) AS r(id, digest) ON r.id = e.id
     WHERE e.status = 'invalid' AND md5(e.envelope::text) = r.digest
       FOR UPDATE OF e
), purged AS (
    DELETE FROM /*schema*/events AS e
     USING chosen AS c
     WHERE e.id = c.id AND c.purgeable
    RETURNING e.id
)
SELECT c.id::text AS id, c.aggregate_type, c.aggregate_id::text AS aggregate_id, c.aggregate_seq,
       EXISTS (SELECT 1 FROM purged AS p WHERE p.id = c.id) AS purged
  FROM chosen AS c
 ORDER BY c.id
