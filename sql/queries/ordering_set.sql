-- ordering_set: switch the schema's ordering on ($1 true) or off ($1 false),
-- for outboxctl ordering on|off. Returns whether it was on before. The
-- function (migration 0014) runs as the schema's owner and waits at most
-- its lock_timeout for the writers in flight.
SELECT /*schema*/set_ordering($1::boolean) AS was_on
