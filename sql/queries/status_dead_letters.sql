-- status_dead_letters: dead letters not requeued, per handler ('' is the relay).
SELECT handler, count(*) AS dead_letters
  FROM /*schema*/dead_letters
 WHERE requeued_at IS NULL
 GROUP BY handler
 ORDER BY handler
