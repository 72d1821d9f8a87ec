-- listen_wakeup: LISTEN on the wake-up channel of a schema (see 0002_relay).
-- $1: the schema name, unquoted.
SELECT /*schema*/wakeup_listen($1)
