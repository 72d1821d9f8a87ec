-- fleet_lock_take: try to become the one fleet replica serving a schema of this
-- database. A session advisory lock: held while this connection lives, so a
-- replica that dies (or loses its connection) hands the database over at once.
-- $1: the outbox schema name, unquoted (two schemas in one database are two
-- fleet entries, owned separately).
SELECT pg_try_advisory_lock(hashtext('pgoutbox.fleet'), hashtext($1))
