-- fleet_lock_check: is the ownership lock of a schema still held by this
-- session? A round trip that also proves the connection alive.
-- $1: the outbox schema name, unquoted.
SELECT count(*) FROM pg_locks
 WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
   AND classid = hashtext('pgoutbox.fleet')::oid AND objid = hashtext($1)::oid AND objsubid = 2
