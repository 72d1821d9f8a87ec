-- outbox_health: what the relay's gauges show, sampled every few seconds.
-- $1: the outbox schema's name (unquoted), to find its table statistics.
-- Ages are in database time. The index counters are the table's indexes
-- but its primary key (finishes find rows by id): the claim index. Their
-- growth between two samples, entries read over scans, is what one lease
-- reads; a bitmap scan or a scan over dead entries shows as a jump. Its
-- live rows fetched over scans (idx_tup_fetch) are the rows a lease read
-- from the table: the rows it leased plus those it stepped over.
WITH claims AS MATERIALIZED (
    -- The window claims out now, read once: between autovacuum naps the
    -- table holds thousands of dead claim rows, a scan's real cost.
    SELECT claimed_at, ids, min_tx FROM /*schema*/relay_claims
), head_from AS MATERIALIZED (
    -- Where the windows' fresh rows not yet published start. The floor
    -- (relay_floor) is written by a claim every 2 seconds at most, so under
    -- load it trails by 20,000 published rows and more, and the ordered scan
    -- below stepped over them all, a heap fetch each: 0.1-0.3 s a sample at
    -- 10,000 events/s. The same bound, taken now from this statement's view
    -- of the cursor and the claims, is where claim_window.sql would put the
    -- floor next: every row visible in the window's start (s_lo) was taken
    -- by a claim, so a row not yet published is either in a claim out now
    -- (its min_tx) or of a transaction that had not ended at s_lo (at its
    -- xmin or later). Rows given back or waiting for their head left the
    -- windows for the retries' index (the second scan). With no window
    -- start (a first window, or a cursor emptied by a crash) the floor is
    -- the bound, as for the claim.
    SELECT CASE WHEN c.s_lo IS NULL THEN f.tx
                ELSE greatest(f.tx, least(pg_snapshot_xmin(c.s_lo),
                                          (SELECT min(min_tx) FROM claims))) END AS tx
      FROM /*schema*/relay_floor AS f
      LEFT JOIN /*schema*/relay_cursor AS c ON true
)
SELECT
    -- The oldest due row: the older of the windows' head (fresh rows in
    -- (tx, id) order, claimed ones included: they are due until published)
    -- and the first due row that came back. Each is the first entry of an
    -- ordered index scan, not min() over all due rows: without statistics
    -- the planner aggregated the whole due range.
    (SELECT extract(epoch FROM now() - min(d.due_at))::bigint
       FROM ((SELECT next_attempt_at AS due_at
                FROM /*schema*/events
               WHERE published_at IS NULL AND next_attempt_at <= created_at
                 AND status = 'pending'
                 -- Published rows stay in the index (0013): start past
                 -- them (head_from).
                 AND tx >= (SELECT tx FROM head_from)
               ORDER BY tx, id
               LIMIT 1)
             UNION ALL
             (SELECT next_attempt_at
                FROM /*schema*/events
               WHERE published_at IS NULL AND next_attempt_at > created_at
                 AND status = 'pending' AND next_attempt_at <= now()
               ORDER BY next_attempt_at
               LIMIT 1)) AS d)
        AS oldest_due_s,
    -- Rows out for publishing: those of window claims (a few batches per
    -- relay, found by primary key) and row-leased ones. Row leases hold only
    -- rows that came back (events_retry_idx); they are looked for among the
    -- first 20,000 of those in due order, so the sample costs the same
    -- however many wait behind them (an outage's released rows). Fresh rows
    -- waiting in the windows are never read. Each claimed row is looked up
    -- by its key: the LIMIT keeps the planner from turning the join around,
    -- which on a table it believed nearly empty (never analyzed) read every
    -- retained row through the primary key.
    (SELECT extract(epoch FROM now() - min(u.created_at))::bigint
       FROM (SELECT e.created_at
               FROM claims AS c
              CROSS JOIN LATERAL unnest(c.ids) AS i(id)
              CROSS JOIN LATERAL (SELECT e.created_at
                                    FROM /*schema*/events AS e
                                   WHERE e.id = i.id AND e.published_at IS NULL
                                   LIMIT 1) AS e
             UNION ALL
             SELECT h.created_at
               FROM (SELECT created_at, status
                       FROM /*schema*/events
                      WHERE published_at IS NULL AND next_attempt_at > created_at
                      ORDER BY next_attempt_at
                      LIMIT 20000) AS h
              WHERE h.status = 'leased') AS u)
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
    -- The oldest snapshot or xid that vacuum must respect on the outbox table
    -- (FAULTS.md T14): sessions of this database (other databases' do not
    -- hold back its tables), and its prepared transactions. A transaction idle
    -- after a statement keeps its xid but not its snapshot. Other roles'
    -- xact_start needs pg_read_all_stats, which outbox_relay is not granted:
    -- then the gauge shows this role's own sessions only.
    greatest(
        (SELECT extract(epoch FROM now() - min(coalesce(a.xact_start, a.query_start)))::bigint
           FROM pg_stat_activity AS a
          WHERE (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
            AND a.datname = current_database() AND a.pid <> pg_backend_pid()),
        (SELECT extract(epoch FROM now() - min(p.prepared))::bigint FROM pg_prepared_xacts AS p
          WHERE p.database = current_database()),
        0) AS horizon_age_s,
    -- How long the oldest window claim has been out. A claim holds no
    -- transaction open, so it holds back no vacuum; at its end
    -- (OUTBOX_LEASE_SECONDS, renewed while its batch is published) the next
    -- claim gives its rows back.
    (SELECT coalesce(extract(epoch FROM now() - min(claimed_at))::bigint, 0)
       FROM claims) AS claim_open_s,
    -- Ordered aggregates held by a dead or quarantined head (migration 0016).
    /*schema*/blocked_aggregates() AS blocked_aggregates
  FROM pg_stat_user_tables AS t
 WHERE t.schemaname = $1 AND t.relname = 'events'
