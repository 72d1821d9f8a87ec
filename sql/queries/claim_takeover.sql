-- claim_takeover: give back the rows of window claims whose holder died or
-- stalled (expires_at passed with no finish). No parameters; runs under the
-- cursor lock, before the claim.
-- Each row is charged one lease expiry and leaves the windows for the row
-- lease (next_attempt_at after created_at: due now), which counts further
-- expiries, leases a suspect alone and quarantines at the limit, as for a
-- leased row whose lease ran out. The claim row goes in the same
-- statement, so its holder's finish, if it wakes, finds no claim and
-- changes nothing. Returns the number of rows given back, and whether the
-- row lease (lease_batch.sql) has rows due: those, or any that came back
-- before. A relay whose window is empty leases rows only when it has,
-- so an idle wake-up costs one round trip, not two. The look is the
-- row lease's own due range of events_retry_idx, in its own words: a few
-- entries read, and none when nothing came back.
WITH gone AS (
    DELETE FROM /*schema*/relay_claims WHERE expires_at < now() RETURNING ids
), given AS (
    UPDATE /*schema*/events AS e
       SET lease_expiries = e.lease_expiries + 1,
           next_attempt_at = greatest(now(), e.created_at + interval '1 microsecond')
     WHERE EXISTS (SELECT 1 FROM gone) -- nothing read when no claim ran out: the usual case
       AND e.id = ANY (ARRAY(SELECT unnest(ids) FROM gone))
       AND e.published_at IS NULL AND e.status = 'pending' AND e.next_attempt_at <= e.created_at
    RETURNING 1
)
SELECT count(*) AS given_back,
       count(*) > 0 OR EXISTS (
           SELECT 1
             FROM /*schema*/events
            WHERE published_at IS NULL
              AND next_attempt_at > created_at
              AND next_attempt_at <= now()
              AND (status = 'pending' OR (status = 'leased' AND leased_until < now()))) AS retries_due
  FROM given
