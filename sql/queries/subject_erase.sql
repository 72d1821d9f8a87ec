-- subject_erase: remove a data subject from the tables, for outboxctl erase,
-- and log the erasure. $1: the data subject.
-- Deleted: every outbox row of the subject, whatever its status (queued rows
-- are never published), and its dead letters. The ledger rows of those
-- events stay - they hold ids and handler names, and they are what stops a
-- message the stream still holds from running a handler again - but their
-- last_error, which a handler may have filled with payload text, is cleared.
-- The erasures row keeps the subject's SHA-256 only. Returns one 'erasure'
-- item (erasure_id: its erasures row) and one row per deleted event and dead letter.
WITH gone AS (
    DELETE FROM /*schema*/events AS e
     WHERE e.data_subject = $1::text
    RETURNING e.id, e.status, e.stream_seq, e.published_at
), letters AS (
    DELETE FROM /*schema*/dead_letters AS d
     WHERE d.envelope ->> 'data_subject' = $1::text OR d.event_id IN (SELECT id FROM gone)
    RETURNING d.event_id, d.handler
), ledger AS (
    UPDATE /*schema*/processed_events AS p
       SET last_error = NULL
     WHERE p.last_error IS NOT NULL
       AND p.event_id IN (SELECT id FROM gone UNION SELECT event_id FROM letters)
    RETURNING p.event_id
), logged AS (
    INSERT INTO /*schema*/erasures (subject_sha256, events, dead_letters, ledger_rows)
    SELECT encode(sha256(convert_to($1::text, 'UTF8')), 'hex'),
           (SELECT count(*) FROM gone), (SELECT count(*) FROM letters),
           (SELECT count(*) FROM ledger)
    RETURNING id, subject_sha256, events, dead_letters, ledger_rows
)
SELECT 'erasure' AS item, NULL::text AS event_id, NULL::text AS handler, NULL::text AS status,
       NULL::bigint AS stream_seq, NULL::timestamptz AS published_at, l.id AS erasure_id,
       l.subject_sha256, l.events, l.dead_letters, l.ledger_rows
  FROM logged AS l
UNION ALL
SELECT 'event', g.id::text, NULL, g.status, g.stream_seq, g.published_at, NULL, NULL, NULL, NULL,
       NULL
  FROM gone AS g
UNION ALL
SELECT 'dead_letter', t.event_id::text, t.handler, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
  FROM letters AS t
