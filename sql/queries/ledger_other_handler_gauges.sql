-- ledger_other_handler_gauges: ledger_handler_gauges.sql's gauges for the
-- handlers this consumer does not run but the ledger knows: those with dead
-- letters (requeued ones too, so a handler's gauge stays at 0 after its
-- letters are requeued instead of vanishing) or parked events, and those
-- that receive() registered. An SQL API's handler (a service's try_claim,
-- claim or receive) has no daemon of its own, so an operator alerting on
-- dead letters sees it here. A handler another consumer registered within
-- the hour is left to that consumer (its maintenance pass refreshes
-- last_seen every 5 minutes); the relay's own ('') to the relay.
-- $1: this consumer's handler names (text[]).
-- Returns handler, dead_letters, parked, oldest_parked_seconds: at most 64
-- handlers, by name.
WITH seen AS (
    SELECT DISTINCT d.handler FROM /*schema*/dead_letters AS d WHERE d.handler <> ''
    UNION
    SELECT DISTINCT p.handler FROM /*schema*/parked_events AS p
    UNION
    SELECT h.name FROM /*schema*/handlers AS h WHERE h.consumer_group = 'receive'
), other AS (
    SELECT s.handler
      FROM seen AS s
     WHERE s.handler <> ALL ($1::text[])
       AND NOT EXISTS (SELECT 1
                         FROM /*schema*/handlers AS h
                        WHERE h.name = s.handler AND h.consumer_group <> 'receive'
                          AND h.last_seen > now() - interval '1 hour')
     ORDER BY s.handler
     LIMIT 64
)
SELECT o.handler,
       (SELECT count(*) FROM /*schema*/dead_letters AS d
         WHERE d.handler = o.handler AND d.requeued_at IS NULL) AS dead_letters,
       (SELECT count(*) FROM /*schema*/parked_events AS p
         WHERE p.handler = o.handler) AS parked,
       coalesce((SELECT floor(extract(epoch FROM now() - min(p.parked_at)))::bigint
                   FROM /*schema*/parked_events AS p
                  WHERE p.handler = o.handler), 0) AS oldest_parked_seconds
  FROM other AS o
 ORDER BY o.handler
