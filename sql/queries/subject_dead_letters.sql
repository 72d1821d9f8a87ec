-- subject_dead_letters: a data subject's dead letters: their envelope names it,
-- or their outbox row does (an envelope that could not be kept), for outboxctl
-- export. $1: the data subject.
SELECT d.event_id, d.handler, d.reason, d.attempts, d.dead_at, d.requeued_at, d.envelope
  FROM /*schema*/dead_letters AS d
  LEFT JOIN /*schema*/events AS e ON e.id = d.event_id
 WHERE d.envelope ->> 'data_subject' = $1::text OR e.data_subject = $1::text
 ORDER BY d.event_id, d.handler
