-- demo_audit: every event the demo's writers committed, with its outbox status.
-- No parameters. A row missing from events (pruned) has status NULL.
SELECT r.event_id, e.status
  FROM demo_reviews AS r
  LEFT JOIN /*schema*/events AS e ON e.id = r.event_id
