-- subject_events: a data subject's outbox rows (queued and retained), for
-- outboxctl export and erase. $1: the data subject.
SELECT e.id, e.status, e.event_type, e.aggregate_type, e.aggregate_id, e.created_at,
       e.published_at, e.stream_seq, e.last_error, e.envelope
  FROM /*schema*/events AS e
 WHERE e.data_subject = $1::text
 ORDER BY e.id
