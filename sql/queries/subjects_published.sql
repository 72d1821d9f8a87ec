-- subjects_published: the subjects the outbox's retained rows publish on,
-- for outboxctl subjects. $1: the subject prefix.
SELECT $1::text || '.' || aggregate_type || '.' || event_type AS subject,
       count(*) AS outbox_rows, max(created_at) AS last_created_at
  FROM /*schema*/events
 GROUP BY aggregate_type, event_type
 ORDER BY 1
