-- quarantine_release: quarantined rows that pass the relay's check again
-- become pending, due now, with their counts and lease cleared and the
-- reason gone, for outboxctl quarantine release. $1: ids (uuid[]); $2: the
-- digest of each envelope as checked (text[], same order): a row whose
-- envelope changed since, or that is no longer quarantined, is left alone.
-- A row skipped as a gap of its ordered aggregate (quarantine_skip.sql)
-- is left alone too: the events behind it went out first.
-- No event column is written, so the table's row trigger does not run: the
-- caller has just checked the envelope with the relay's own code.
UPDATE /*schema*/events AS e
   SET status = 'pending', attempts = 0, lease_expiries = 0, next_attempt_at = now(),
       last_error = NULL, leased_until = NULL, lease_token = NULL, published_at = NULL
  FROM unnest($1::uuid[], $2::text[]) AS r(id, digest)
 WHERE e.id = r.id AND e.status = 'invalid' AND md5(e.envelope::text) = r.digest
   AND NOT (e.aggregate_seq IS NOT NULL
            AND EXISTS (SELECT 1 FROM /*schema*/aggregate_skips AS k
                         WHERE k.aggregate_type = e.aggregate_type
                           AND k.aggregate_id = e.aggregate_id
                           AND k.aggregate_seq = e.aggregate_seq AND k.handler = ''))
RETURNING e.id::text AS id
