-- quarantine_count: how many rows the relay has quarantined (status
-- invalid), for outboxctl validate to point at outboxctl quarantine.
SELECT count(*) AS quarantined
  FROM /*schema*/events
 WHERE status = 'invalid'
