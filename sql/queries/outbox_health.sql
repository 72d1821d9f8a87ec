-- outbox_health: what the relay's gauges show, sampled every few seconds.
-- $1: the outbox schema's name (unquoted), to find its table statistics.
-- Ages are in database time. The index counters are the table's indexes
-- but its primary key (finishes find rows by id): the claim index. Their
-- growth between two samples, entries read over scans, is what one lease
-- reads; a bitmap scan or a scan over dead entries shows as a jump. Its
-- live rows fetched over scans (idx_tup_fetch) are the rows a lease read
-- from the table: the rows it leased plus those it stepped over.
SELECT
    (SELECT extract(epoch FROM now() - min(next_attempt_at))::bigint
       FROM /*schema*/events
      WHERE published_at IS NULL AND status = 'pending' AND next_attempt_at <= now())
        AS oldest_due_s,
    (SELECT extract(epoch FROM now() - min(created_at))::bigint
       FROM /*schema*/events
      WHERE published_at IS NULL AND status = 'leased')
        AS oldest_unconfirmed_s,
    t.n_dead_tup,
    extract(epoch FROM greatest(t.last_vacuum, t.last_autovacuum))::bigint AS last_vacuum_unix,
    (SELECT sum(i.idx_tup_read) FROM pg_stat_user_indexes AS i
      WHERE i.relid = t.relid
        AND i.indexrelid NOT IN (SELECT conindid FROM pg_constraint
                                  WHERE conrelid = t.relid AND contype = 'p'))
        AS claim_index_reads,
    (SELECT sum(i.idx_scan) FROM pg_stat_user_indexes AS i
      WHERE i.relid = t.relid
        AND i.indexrelid NOT IN (SELECT conindid FROM pg_constraint
                                  WHERE conrelid = t.relid AND contype = 'p'))
        AS claim_index_scans,
    (SELECT sum(i.idx_tup_fetch) FROM pg_stat_user_indexes AS i
      WHERE i.relid = t.relid
        AND i.indexrelid NOT IN (SELECT conindid FROM pg_constraint
                                  WHERE conrelid = t.relid AND contype = 'p'))
        AS claim_index_fetches,
    (SELECT count(*) FROM /*schema*/dead_letters
      WHERE handler = '' AND requeued_at IS NULL)
        AS dead_letters,
    -- The oldest snapshot or xid anyone holds, which vacuum must respect
    -- (FAULTS.md T14; idle after a statement, a transaction keeps its xid but
    -- not its snapshot): sessions (needs pg_read_all_stats to see other
    -- roles' xact_start, which outbox_relay is not granted: then it shows
    -- this role's own) and prepared transactions.
    greatest(
        (SELECT extract(epoch FROM now() - min(coalesce(a.xact_start, a.query_start)))::bigint
           FROM pg_stat_activity AS a
          WHERE (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
            AND a.pid <> pg_backend_pid()),
        (SELECT extract(epoch FROM now() - min(p.prepared))::bigint FROM pg_prepared_xacts AS p),
        0) AS horizon_age_s
  FROM pg_stat_user_tables AS t
 WHERE t.schemaname = $1 AND t.relname = 'events'
