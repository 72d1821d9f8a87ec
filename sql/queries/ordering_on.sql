-- ordering_on: whether the schema numbers its events now, for the line
-- outboxctl migrate prints (ordering_status counts rows as well: too much
-- for a deploy hook on a large outbox).
SELECT /*schema*/ordering_on() AS ordering
