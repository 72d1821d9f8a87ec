-- doctor_database: the session's settings and the xmin horizon, for outboxctl doctor.
-- What holds the horizon back: the oldest transaction of another session that
-- has a snapshot or an xid (a transaction idle after its last statement keeps
-- its xid, not its snapshot: backend_xmin is NULL then), sessions idle in a
-- transaction, replication slots nobody reads, prepared transactions, and how
-- old the database's frozen xid is.
-- hidden_sessions counts other sessions this role may not see (their state is
-- NULL without pg_read_all_stats), so the numbers can be incomplete.
WITH others AS MATERIALIZED (
    SELECT pid, application_name, state, xact_start, state_change, backend_type,
           backend_xmin IS NOT NULL OR backend_xid IS NOT NULL AS holds_horizon
      FROM pg_stat_activity
     WHERE pid <> pg_backend_pid()
)
SELECT current_setting('idle_in_transaction_session_timeout') AS idle_in_transaction_timeout,
       current_setting('statement_timeout') AS statement_timeout,
       (SELECT extract(epoch FROM now() - min(xact_start))::float8 FROM others
         WHERE holds_horizon) AS oldest_xact_s,
       (SELECT format('pid %s (%s, %s)', pid, coalesce(nullif(application_name, ''), '?'),
                      coalesce(state, '?'))
          FROM others WHERE holds_horizon ORDER BY xact_start LIMIT 1) AS oldest_xact,
       (SELECT pid FROM others WHERE holds_horizon ORDER BY xact_start LIMIT 1)
                                                                       AS oldest_xact_pid,
       (SELECT count(*) FROM others WHERE state LIKE 'idle in transaction%') AS idle_in_xact,
       (SELECT extract(epoch FROM now() - min(state_change))::float8 FROM others
         WHERE state LIKE 'idle in transaction%') AS idle_in_xact_s,
       (SELECT count(*) FROM others WHERE backend_type = 'client backend' AND state IS NULL)
                                                                       AS hidden_sessions,
       (SELECT string_agg(slot_name::text, ',') FROM pg_replication_slots
         WHERE NOT active AND (xmin IS NOT NULL OR catalog_xmin IS NOT NULL)) AS idle_slots,
       (SELECT count(*) FROM pg_prepared_xacts) AS prepared,
       (SELECT extract(epoch FROM now() - min(prepared))::float8 FROM pg_prepared_xacts)
                                                                       AS prepared_oldest_s,
       (SELECT string_agg(gid, ',') FROM pg_prepared_xacts) AS prepared_gids,
       (SELECT age(datfrozenxid)::bigint FROM pg_database WHERE datname = current_database())
                                                                       AS frozen_xid_age
