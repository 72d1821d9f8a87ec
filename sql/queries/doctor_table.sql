-- doctor_table: dead tuples and the last vacuum of the outbox table, for outboxctl doctor.
SELECT n_live_tup, n_dead_tup, last_autovacuum, last_vacuum, autovacuum_count,
       extract(epoch FROM now() - greatest(last_autovacuum, last_vacuum))::float8
           AS since_vacuum_s
  FROM pg_stat_user_tables
 WHERE relid = '/*schema*/events'::regclass
