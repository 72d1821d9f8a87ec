-- quarantine_skip: record quarantined rows as gaps of their ordered
-- aggregates (aggregate_skips, migration 0015, handler '': for relays and
-- every handler), for outboxctl quarantine skip, so the events behind a
-- quarantined head go on. $1: ids (uuid[]), as quarantine_rows.sql listed
-- them; $2: the digest of each envelope as listed (text[], same order): a
-- row repaired, released or purged since is left alone (no row returned).
-- The row stays quarantined, to read, and is never released (the events
-- behind it went out first: quarantine_release.sql leaves a skipped row
-- alone). A row without a number (unordered) is reported and left as it
-- is. The relay's rows that waited behind it are due at once. Returns one
-- row per row chosen: id, aggregate_seq, skipped, woken, reason.
WITH chosen AS MATERIALIZED (
    SELECT e.id, e.aggregate_type, e.aggregate_id, e.aggregate_seq
      FROM /*schema*/events AS e
      JOIN unnest($1::uuid[], $2::text[]) AS r(id, digest) ON r.id = e.id
     WHERE e.status = 'invalid' AND md5(e.envelope::text) = r.digest
       FOR UPDATE OF e
), recorded AS (
    INSERT INTO /*schema*/aggregate_skips (aggregate_type, aggregate_id, aggregate_seq,
                                           handler, event_id)
    SELECT c.aggregate_type, c.aggregate_id, c.aggregate_seq, '', c.id
      FROM chosen AS c
     WHERE c.aggregate_seq IS NOT NULL
        ON CONFLICT DO NOTHING
    RETURNING event_id
), woken AS (
    UPDATE /*schema*/events AS w
       SET next_attempt_at = greatest(now(), w.created_at + interval '1 microsecond')
      FROM chosen AS c
     WHERE c.aggregate_seq IS NOT NULL
       AND w.aggregate_type = c.aggregate_type AND w.aggregate_id = c.aggregate_id
       AND w.aggregate_seq > c.aggregate_seq
       AND w.status = 'pending' AND w.last_error = 'waiting_for_head'
       AND w.next_attempt_at > now()
    RETURNING w.aggregate_type, w.aggregate_id
)
SELECT c.id::text AS id, c.aggregate_seq,
       EXISTS (SELECT 1 FROM recorded AS r WHERE r.event_id = c.id) AS skipped,
       (SELECT count(*) FROM woken AS w
         WHERE w.aggregate_type = c.aggregate_type AND w.aggregate_id = c.aggregate_id) AS woken,
       CASE WHEN c.aggregate_seq IS NULL THEN 'not ordered: it has no aggregate_seq, '
                                              'so nothing waits behind it'
            WHEN NOT EXISTS (SELECT 1 FROM recorded AS r WHERE r.event_id = c.id)
            THEN 'skipped already' END AS reason
  FROM chosen AS c
 ORDER BY c.id
