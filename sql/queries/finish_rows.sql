-- finish_rows: apply one outcome per leased row, all in one statement.
-- $1: lease token; $2: ids (uuid[]); $3: outcomes (text[]: done, retry,
-- release, invalid, wait); $4: reasons (text[], NULL for done and release);
-- $5: prune (boolean: delete done rows instead of marking them);
-- $6: max attempts; $7: release delay in ms; $8, $9: backoff base and cap in ms;
-- $10: per-row release delays in ms (bigint[], NULL: $7 for every row);
-- $11: per-row stream sequences of published rows (bigint[], NULL: unknown).
-- Every write is guarded by the token and status leased (a row lease) or
-- by the window claim of that token (claim_window.sql), so a relay whose
-- lease ran out (another relay holds the row now) changes nothing; the
-- caller counts those rows as lost. A retry that reaches $6 attempts goes
-- dead with a dead letter; otherwise it waits backoff_ms() in database time.
-- Dead and invalid rows park at next_attempt_at 'infinity', at the end of
-- the retries' index, past every lease. A done row's update changes no
-- indexed column (0013), so in mark mode it is HOT.
WITH claim AS (
    -- A window claim's rows are held while its claim row is; deleting it
    -- here fences a holder whose claim ran out (given back, leased again).
    DELETE FROM /*schema*/relay_claims WHERE token = $1::uuid RETURNING token
), input AS MATERIALIZED (
    SELECT *
      FROM unnest($2::uuid[], $3::text[], $4::text[], $10::bigint[], $11::bigint[])
           AS i(id, outcome, reason, delay_ms, seq)
), deleted AS (
    DELETE FROM /*schema*/events AS e
     USING input AS i
     WHERE e.id = i.id AND i.outcome = 'done' AND $5::boolean
       AND (e.lease_token = $1::uuid AND e.status = 'leased'
            OR e.status = 'pending' AND EXISTS (SELECT 1 FROM claim))
    RETURNING e.id
), marked AS (
    UPDATE /*schema*/events AS e
       SET status = 'done', published_at = now(), leased_until = NULL, lease_token = NULL,
           -- A row that came back leaves the retries' index; a fresh one keeps
           -- its value, so no indexed column changes and the update is HOT.
           next_attempt_at = least(e.next_attempt_at, e.created_at),
           stream_seq = i.seq
      FROM input AS i
     WHERE e.id = i.id AND i.outcome = 'done' AND NOT $5::boolean
       AND (e.lease_token = $1::uuid AND e.status = 'leased'
            OR e.status = 'pending' AND EXISTS (SELECT 1 FROM claim))
    RETURNING e.id
), retried AS (
    UPDATE /*schema*/events AS e
       SET attempts = e.attempts + 1,
           last_error = i.reason,
           status = CASE WHEN e.attempts + 1 >= $6::integer THEN 'dead' ELSE 'pending' END,
           next_attempt_at = CASE WHEN e.attempts + 1 >= $6::integer THEN 'infinity'
                                  ELSE now() + interval '1 millisecond'
                                               * /*schema*/backoff_ms(e.attempts + 1, $8::integer,
                                                                      $9::integer, random())
                             END,
           leased_until = NULL, lease_token = NULL
      FROM input AS i
     WHERE e.id = i.id AND i.outcome = 'retry'
       AND (e.lease_token = $1::uuid AND e.status = 'leased'
            OR e.status = 'pending' AND EXISTS (SELECT 1 FROM claim))
    RETURNING e.id, e.status, e.envelope, e.attempts, e.last_error
), letters AS (
    INSERT INTO /*schema*/dead_letters AS d (event_id, handler, envelope, reason, attempts)
    SELECT id, '', envelope, coalesce(last_error, 'max_attempts_reached'), attempts
      FROM retried
     WHERE status = 'dead'
        ON CONFLICT (event_id, handler) DO UPDATE
       SET envelope = excluded.envelope, reason = excluded.reason,
           attempts = excluded.attempts, dead_at = now(), requeued_at = NULL
), released AS (
    UPDATE /*schema*/events AS e
       SET status = 'pending',
           next_attempt_at = now() + interval '1 millisecond'
                                     * coalesce(i.delay_ms, $7::integer),
           leased_until = NULL, lease_token = NULL
      FROM input AS i
     WHERE e.id = i.id AND i.outcome = 'release'
       AND (e.lease_token = $1::uuid AND e.status = 'leased'
            OR e.status = 'pending' AND EXISTS (SELECT 1 FROM claim))
    RETURNING e.id
), waited AS (
    -- Published before a number of its aggregate that this lease could not
    -- publish (store_heads_pg.c): recorded as waiting for its head, so the
    -- numbers after it wait too, and sent again after the head.
    UPDATE /*schema*/events AS e
       SET status = 'pending', leased_until = NULL, lease_token = NULL,
           next_attempt_at = /*schema*/head_wait_until(e.created_at)
                             + interval '1 microsecond' * (e.aggregate_seq % 1000000),
           last_error = 'waiting_for_head'
      FROM input AS i
     WHERE e.id = i.id AND i.outcome = 'wait'
       AND (e.lease_token = $1::uuid AND e.status = 'leased'
            OR e.status = 'pending' AND EXISTS (SELECT 1 FROM claim))
    RETURNING e.id
), invalidated AS (
    UPDATE /*schema*/events AS e
       SET status = 'invalid', last_error = i.reason, leased_until = NULL, lease_token = NULL,
           next_attempt_at = 'infinity'
      FROM input AS i
     WHERE e.id = i.id AND i.outcome = 'invalid'
       AND (e.lease_token = $1::uuid AND e.status = 'leased'
            OR e.status = 'pending' AND EXISTS (SELECT 1 FROM claim))
    RETURNING e.id
)
SELECT (SELECT count(*) FROM deleted) + (SELECT count(*) FROM marked) AS done,
       (SELECT count(*) FROM retried WHERE status = 'pending') AS retried,
       (SELECT count(*) FROM retried WHERE status = 'dead') AS dead,
       (SELECT count(*) FROM released) + (SELECT count(*) FROM waited) AS released,
       (SELECT count(*) FROM invalidated) AS invalid
