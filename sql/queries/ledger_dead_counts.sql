-- ledger_dead_counts: each handler's dead letters still waiting for an
-- operator (not requeued), for the consumer's gauges.
-- $1: the handlers' names (text[]). Returns handler, dead_letters.
SELECT handler, count(*) AS dead_letters
  FROM /*schema*/dead_letters
 WHERE handler = ANY ($1::text[]) AND requeued_at IS NULL
 GROUP BY handler
