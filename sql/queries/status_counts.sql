-- status_counts: one row with the outbox's health, for outboxctl status.
-- oldest_pending_age_s counts only rows due now, so rows parked in
-- backoff do not raise it; a lease that ran out makes its row due again.
SELECT count(*) FILTER (WHERE status = 'pending')                        AS pending,
       count(*) FILTER (WHERE status = 'leased')                         AS leased,
       count(*) FILTER (WHERE status = 'done')                           AS done,
       count(*) FILTER (WHERE status = 'dead')                           AS dead,
       count(*) FILTER (WHERE status = 'invalid')                        AS invalid,
       count(*) FILTER (WHERE status = 'pending' AND next_attempt_at > now()) AS backing_off,
       coalesce(extract(epoch FROM now() - min(created_at) FILTER (
                    WHERE (status = 'pending' AND next_attempt_at <= now())
                       OR (status = 'leased' AND leased_until < now()))), 0)::float8
                                                                          AS oldest_pending_age_s,
       (SELECT count(*) FROM /*schema*/dead_letters WHERE requeued_at IS NULL) AS dead_letters,
       (SELECT coalesce(max(version), 0) FROM /*schema*/schema_migrations)    AS schema_version
  FROM /*schema*/events
