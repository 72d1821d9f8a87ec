-- lease_batch: lease up to $1 due events for $2 seconds under one fresh token.
-- $1: batch limit; $2: lease seconds; $3: max lease expiries (>= 1).
-- Takes the rows that came back, not fresh ones (those are claimed by
-- window, claim_window.sql): a retry, a release, a requeue, a window claim
-- run out, all with next_attempt_at after created_at. Due: pending with next_attempt_at reached, or
-- leased with the lease run out (a leased row keeps the next_attempt_at it
-- was leased at). One scan of events_retry_idx finds both, oldest first;
-- claimed by state, never by an id cursor. (outbox-bench's comparison with
-- the claim before windows leases every due row: its copy of this
-- statement reads `true OR` at the marker, store_conn_pg.c, on a table
-- given back that claim's events_due_idx, loader_pg.c.) The candidates are
-- a MATERIALIZED CTE with its LIMIT, so the planner cannot re-run a locking
-- subquery and the batch never exceeds $1 (the LIMIT-in-subquery trap).
-- SKIP LOCKED gives replicas disjoint batches. The update is HOT when the
-- row's page has room (no index names a column it changes).
-- An expired lease counts one lease expiry; the one that reaches $3 turns
-- the row dead with a dead letter instead of leasing it again, so a row
-- that crashes every relay that takes it stops after $3 tries. A row whose
-- lease runs out a second time is a suspect and is leased alone: the rows
-- leased with a row that crashes relays must not reach $3 with it. A first
-- expiry (a replica died) keeps its batch, so that recovery stays cheap.
-- Returns the leased rows (quarantined = false) first, in id order (an
-- ordered aggregate's after the others, in number order), then
-- the quarantined ones, without their envelope; lease_expiries counts the
-- leases of the row that ran out, this call's included, and taken_over says
-- this call found the row's lease run out (leased again or quarantined).
-- Then the columns the envelope must repeat: the relay publishes only an
-- envelope that matches its row, in case the row rules were bypassed.
WITH candidates AS MATERIALIZED (
    SELECT id, next_attempt_at, (status = 'leased')::integer AS expiry, aggregate_type,
           aggregate_id, aggregate_seq,
           -- A window claim run out charged its pending rows already.
           (status = 'leased' AND lease_expiries + 1 >= $3)
           OR (status = 'pending' AND lease_expiries >= $3) AS quarantine,
           status = 'leased' AND lease_expiries > 0 AS suspect
      FROM /*schema*/events
     WHERE published_at IS NULL AND (/*came_back*/ next_attempt_at > created_at)
       AND next_attempt_at <= now()
       AND (status = 'pending' OR (status = 'leased' AND leased_until < now()))
     ORDER BY next_attempt_at
     LIMIT $1
       FOR UPDATE SKIP LOCKED
), lone AS MATERIALIZED (
    SELECT id FROM candidates WHERE suspect AND NOT quarantine ORDER BY next_attempt_at LIMIT 1
), picked AS MATERIALIZED (
    -- With a suspect, the other candidates stay as they are (only their row
    -- locks were taken) for the next lease; rows turning dead go anyway.
    SELECT id, expiry, quarantine, aggregate_type, aggregate_id, aggregate_seq
      FROM candidates
     WHERE quarantine OR NOT EXISTS (SELECT 1 FROM lone) OR id IN (SELECT id FROM lone)
), runs AS MATERIALIZED (
    -- An ordered aggregate's rows go out only from its head, as in
    -- claim_window.sql: a run without a gap whose first row's predecessor
    -- is published (migration 0016). The others wait again.
    SELECT p.id, p.aggregate_seq - first_value(p.aggregate_seq) OVER w + 1
                 = row_number() OVER w AS in_run,
           first_value(p.aggregate_seq) OVER w AS first_seq, p.aggregate_type, p.aggregate_id
      FROM picked AS p
     WHERE p.aggregate_seq IS NOT NULL AND NOT p.quarantine
    WINDOW w AS (PARTITION BY p.aggregate_type, p.aggregate_id ORDER BY p.aggregate_seq)
), waiting AS MATERIALIZED (
    SELECT r.id
      FROM runs AS r
     WHERE NOT r.in_run
        -- head_waits() of migration 0016, written out: a function with a
        -- subquery is not inlined, and a call per aggregate costs ~50 us.
        OR r.first_seq > 1 AND EXISTS (
               SELECT 1
                 FROM /*schema*/events AS p
                WHERE p.aggregate_type = r.aggregate_type AND p.aggregate_id = r.aggregate_id
                  AND p.aggregate_seq = r.first_seq - 1 AND p.published_at IS NULL
                  AND NOT EXISTS (SELECT 1
                                    FROM /*schema*/aggregate_skips AS k
                                   WHERE k.aggregate_type = r.aggregate_type
                                     AND k.aggregate_id = r.aggregate_id
                                     AND k.aggregate_seq = r.first_seq - 1 AND k.handler = ''))
), parked AS (
    -- A lease that ran out is charged its expiry, and its row waits as pending.
    -- Their due times follow their numbers, so that a run is due in order.
    UPDATE /*schema*/events AS e
       SET status = 'pending', leased_until = NULL, lease_token = NULL,
           lease_expiries = e.lease_expiries + (e.status = 'leased')::integer,
           next_attempt_at = /*schema*/head_wait_until(e.created_at)
                             + interval '1 microsecond' * (e.aggregate_seq % 1000000),
           last_error = 'waiting_for_head'
     WHERE e.id = ANY (ARRAY(SELECT id FROM waiting))
), chosen AS MATERIALIZED (
    SELECT id, expiry, quarantine FROM picked WHERE id NOT IN (SELECT id FROM waiting)
), batch AS MATERIALIZED (
    SELECT gen_random_uuid() AS token
), stamped AS (
    UPDATE /*schema*/events AS e
       SET status = CASE WHEN c.quarantine THEN 'dead' ELSE 'leased' END,
           lease_expiries = e.lease_expiries + c.expiry,
           leased_until = CASE WHEN c.quarantine THEN NULL
                               ELSE now() + make_interval(secs => $2) END,
           next_attempt_at = CASE WHEN c.quarantine THEN 'infinity' ELSE e.next_attempt_at END,
           lease_token = CASE WHEN c.quarantine THEN NULL ELSE b.token END,
           last_error = CASE WHEN c.quarantine THEN 'lease_expired_without_outcome'
                             WHEN e.last_error = 'waiting_for_head' THEN NULL
                             ELSE e.last_error END
      FROM chosen AS c, batch AS b
     WHERE e.id = c.id
    RETURNING e.id, e.status, e.envelope, e.attempts, e.lease_token, e.lease_expiries,
              c.expiry = 1 AS taken_over, e.event_type, e.aggregate_type, e.aggregate_id,
              e.tenant_id, e.data_subject, e.aggregate_seq
), letters AS (
    INSERT INTO /*schema*/dead_letters AS d (event_id, handler, envelope, reason, attempts)
    SELECT id, '', envelope, 'lease_expired_without_outcome', attempts
      FROM stamped
     WHERE status = 'dead'
        ON CONFLICT (event_id, handler) DO UPDATE
       SET envelope = excluded.envelope, reason = excluded.reason,
           attempts = excluded.attempts, dead_at = now(), requeued_at = NULL
)
SELECT id, CASE WHEN status = 'leased' THEN envelope::text END AS envelope, attempts,
       lease_token, status = 'dead' AS quarantined, lease_expiries, taken_over, event_type,
       aggregate_type, aggregate_id::text AS aggregate_id, tenant_id, data_subject,
       aggregate_seq
  FROM stamped
 ORDER BY status = 'dead', CASE WHEN aggregate_seq IS NULL THEN id END, aggregate_type,
          aggregate_id, aggregate_seq, id
