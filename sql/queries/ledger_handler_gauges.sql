-- ledger_handler_gauges: what each handler has waiting, for the consumer's
-- gauges: its dead letters no one requeued, its parked events (migration
-- 0017: early events waiting for their predecessor) and how long the oldest
-- of them has waited, in whole seconds (0 when none).
-- $1: the handlers' names (text[]).
-- Returns handler, dead_letters, parked, oldest_parked_seconds.
SELECT n.handler,
       (SELECT count(*) FROM /*schema*/dead_letters AS d
         WHERE d.handler = n.handler AND d.requeued_at IS NULL) AS dead_letters,
       (SELECT count(*) FROM /*schema*/parked_events AS p
         WHERE p.handler = n.handler) AS parked,
       coalesce((SELECT floor(extract(epoch FROM now() - min(p.parked_at)))::bigint
                   FROM /*schema*/parked_events AS p
                  WHERE p.handler = n.handler), 0) AS oldest_parked_seconds
  FROM unnest($1::text[]) AS n(handler)
