-- status_counts: one row with the outbox's health, for outboxctl status.
-- oldest_pending_age_s counts only rows due now, so rows parked in
-- backoff do not raise it; a lease that ran out makes its row due again.
-- lease_expiries sums the leases of unfinished rows that ran out with no
-- outcome (a relay died or stalled), expired_leases are leases out now.
-- Rows of window claims (relay_claims) count as leased, not pending: out
-- for publishing, though the claim wrote nothing to them; their claim's end
-- counts as their lease's.
-- The ledger's claims: in progress (a live owner), backing off (failed,
-- next try not due), expired (an owner that stopped: taken over next).
WITH ledger AS MATERIALIZED (
    SELECT count(*) FILTER (WHERE owner_token IS NOT NULL AND claimed_until >= now()) AS in_progress,
           count(*) FILTER (WHERE owner_token IS NULL AND next_attempt_at > now()) AS backing_off,
           count(*) FILTER (WHERE owner_token IS NOT NULL AND claimed_until < now()) AS expired
      FROM /*schema*/processed_events
     WHERE status = 'in_progress' AND dead_at IS NULL
), claimed AS MATERIALIZED (
    SELECT coalesce(sum(cardinality(ids)), 0)::bigint AS rows,
           coalesce(sum(cardinality(ids)) FILTER (WHERE expires_at < now()), 0)::bigint AS expired
      FROM /*schema*/relay_claims
)
SELECT count(*) FILTER (WHERE status = 'pending') - (SELECT rows FROM claimed) AS pending,
       count(*) FILTER (WHERE status = 'leased') + (SELECT rows FROM claimed) AS leased,
       count(*) FILTER (WHERE status = 'done')                           AS done,
       count(*) FILTER (WHERE status = 'dead')                           AS dead,
       count(*) FILTER (WHERE status = 'invalid')                        AS invalid,
       count(*) FILTER (WHERE status = 'pending' AND next_attempt_at > now()) AS backing_off,
       coalesce(extract(epoch FROM now() - min(created_at) FILTER (
                    WHERE (status = 'pending' AND next_attempt_at <= now())
                       OR (status = 'leased' AND leased_until < now()))), 0)::float8
                                                                          AS oldest_pending_age_s,
       (SELECT count(*) FROM /*schema*/dead_letters WHERE requeued_at IS NULL) AS dead_letters,
       (SELECT coalesce(max(version), 0) FROM /*schema*/schema_migrations)    AS schema_version,
       coalesce(sum(lease_expiries) FILTER (WHERE status IN ('pending', 'leased')), 0)::bigint
                                                                          AS lease_expiries,
       count(*) FILTER (WHERE status = 'leased' AND leased_until < now())
           + (SELECT expired FROM claimed)                               AS expired_leases,
       (SELECT in_progress FROM ledger)                                  AS ledger_in_progress,
       (SELECT backing_off FROM ledger)                                  AS ledger_backing_off,
       (SELECT expired FROM ledger)                                      AS ledger_expired_claims
  FROM /*schema*/events
