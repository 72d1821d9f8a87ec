-- ledger_parked_waiting: which of the handlers $1 (text[]) have parked
-- events a sweep could take now (migration 0017: not leased, or their
-- lease ran out), so a sweep runs ledger_parked_take for those only. One
-- probe per sweep for every handler: on a schema that never parked an
-- event it reads an empty index, where the take would plan its chains.
-- Returns handler, one row per handler with such events.
SELECT n.handler
  FROM unnest($1::text[]) AS n(handler)
 WHERE EXISTS (SELECT FROM /*schema*/parked_events AS p
                WHERE p.handler = n.handler
                  AND (p.leased_until IS NULL OR p.leased_until < now()))
