-- wake_successors: after a batch's publish, lease the rows that waited for
-- these heads to the relay that published them (migration 0016), or only
-- make them due (receive(), migration 0022).
-- $1: aggregate types (text[]); $2: aggregate ids (uuid[]); $3: the numbers
-- just published (bigint[]), one element per published ordered row; $4: how
-- many numbers after the last published to wake (the relay's batch); $5:
-- lease seconds; $6: max lease expiries (>= 1); $7: lease (boolean): true
-- leases the runs to the caller as below; false leases nothing and makes
-- every waiting row it wakes due now, for the next lease of whoever claims
-- (receive() hands out only what it claimed in the ledger, so a lease of its
-- own would have to be given back, a second write per row).
-- Of the next $4 numbers of each aggregate that wait for their head, the
-- run that follows the published number without a gap is leased at once,
-- under one fresh token, and returned in lease_batch.sql's columns: the
-- relay publishes it as its next batch, with one write per row (leased)
-- where making it due and then leasing it took two. The run's first row's
-- predecessor is the number this relay has just published, so the run is
-- its aggregate's head (checked: the finish recorded it). Rows after a gap (a number not waiting, or locked
-- by another relay), and a row whose window claims ran out $6 times (the
-- row lease turns it dead), are made due now instead, for the row lease,
-- which checks their head again. Waking more than a batch would only make
-- the row lease look at them too early. A row backing off after a failed
-- publish is not waiting for its head, and keeps its time.
WITH published AS MATERIALIZED (
    SELECT aggregate_type, aggregate_id, max(aggregate_seq) AS aggregate_seq
      FROM unnest($1::text[], $2::uuid[], $3::bigint[])
           AS d(aggregate_type, aggregate_id, aggregate_seq)
     -- Nothing waits, the usual case: one read of the empty index, no lookups.
     WHERE EXISTS (SELECT 1 FROM /*schema*/events AS x WHERE x.last_error = 'waiting_for_head')
     GROUP BY 1, 2
), waiting AS MATERIALIZED (
    SELECT w.id, w.aggregate_type, w.aggregate_id, w.aggregate_seq,
           w.aggregate_seq - d.aggregate_seq AS step, w.lease_expiries >= $6::integer AS spent
      FROM published AS d
      JOIN /*schema*/events AS w
        ON w.aggregate_type = d.aggregate_type AND w.aggregate_id = d.aggregate_id
       AND w.aggregate_seq > d.aggregate_seq AND w.aggregate_seq <= d.aggregate_seq + $4::bigint
     -- Due already too (its wait ran out first): the row lease may be
     -- taking it right now, so it is skipped if locked.
     WHERE w.status = 'pending' AND w.last_error = 'waiting_for_head'
       FOR UPDATE OF w SKIP LOCKED
), recorded AS MATERIALIZED (
    -- The aggregates with rows waiting whose published number the finish
    -- recorded: one that lost its lease recorded nothing (another relay
    -- holds that row now), so the rows behind it are only made due.
    SELECT d.aggregate_type, d.aggregate_id
      FROM published AS d
     WHERE (d.aggregate_type, d.aggregate_id) IN (SELECT aggregate_type, aggregate_id FROM waiting)
       AND NOT EXISTS (SELECT 1
                         FROM /*schema*/events AS p
                        WHERE p.aggregate_type = d.aggregate_type
                          AND p.aggregate_id = d.aggregate_id
                          AND p.aggregate_seq = d.aggregate_seq AND p.published_at IS NULL)
), runs AS MATERIALIZED (
    -- In the run: every number from the published one's next up to it is
    -- here, none of them is spent, and the published one is recorded.
    SELECT id, aggregate_type, aggregate_id, aggregate_seq, step,
           step = row_number() OVER w AND NOT bool_or(spent) OVER w
           AND (aggregate_type, aggregate_id) IN (SELECT aggregate_type, aggregate_id
                                                    FROM recorded) AS in_run
      FROM waiting
    WINDOW w AS (PARTITION BY aggregate_type, aggregate_id ORDER BY aggregate_seq)
), capped AS MATERIALIZED (
    -- At most a batch leased in all (a run's prefix is still in order), and
    -- none unless the caller leases.
    SELECT id, step,
           in_run AND $7::boolean
           AND sum(in_run::integer) OVER (ORDER BY aggregate_type, aggregate_id,
                                          aggregate_seq) <= $4::bigint AS in_run
      FROM runs
), batch AS MATERIALIZED (
    SELECT gen_random_uuid() AS token
), woken AS (
    -- Due now, in number order (a microsecond apart), so that the row
    -- lease, which takes the earliest due first, takes an aggregate's run
    -- from its lowest number; after created_at, so the row stays in the
    -- retries' index. A leased row is due too: if its lease runs out, the
    -- row lease takes it back at once.
    UPDATE /*schema*/events AS e
       SET next_attempt_at = greatest(e.created_at, now() - interval '1 second')
                             + interval '1 microsecond' * r.step,
           status = CASE WHEN r.in_run THEN 'leased' ELSE e.status END,
           leased_until = CASE WHEN r.in_run THEN now() + make_interval(secs => $5::integer) END,
           lease_token = CASE WHEN r.in_run THEN b.token END,
           last_error = CASE WHEN r.in_run THEN NULL ELSE e.last_error END
      FROM capped AS r, batch AS b
     WHERE e.id = r.id
    RETURNING e.id, e.status, e.envelope, e.attempts, e.lease_token, e.lease_expiries,
              e.event_type, e.aggregate_type, e.aggregate_id, e.tenant_id, e.data_subject,
              e.aggregate_seq
)
SELECT id, envelope::text AS envelope, attempts, lease_token, false AS quarantined,
       lease_expiries, false AS taken_over, event_type, aggregate_type,
       aggregate_id::text AS aggregate_id, tenant_id, data_subject, aggregate_seq,
       status = 'leased' AS leased
  FROM woken
 ORDER BY status <> 'leased', aggregate_type, aggregate_id, aggregate_seq
