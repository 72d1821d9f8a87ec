-- ledger_parked_settle: what became of parked events a sweep ran.
-- $1: handler; $2: event ids (uuid[]); $3: their lease tokens (uuid[]);
-- $4: per event, NULL to remove the row (the handler is done with it, or
-- it was dead-lettered), or a delay in ms before a sweep may take it again
-- (bigint[]); $5: extend the lease to this many seconds instead (integer;
-- NULL otherwise). Guarded by the lease token: a row parked again since
-- (its lease cleared) is left as it is.
WITH s AS (
    SELECT * FROM unnest($2::uuid[], $3::uuid[], $4::bigint[]) AS s(event_id, token, delay_ms)
), gone AS (
    DELETE FROM /*schema*/parked_events AS p
     USING s
     WHERE $5::integer IS NULL AND s.delay_ms IS NULL
       AND p.handler = $1::text AND p.event_id = s.event_id AND p.lease_token = s.token
    RETURNING 1
)
UPDATE /*schema*/parked_events AS p
   SET lease_token = CASE WHEN $5::integer IS NULL THEN NULL ELSE p.lease_token END,
       leased_until = CASE WHEN $5::integer IS NULL
                           THEN now() + interval '1 millisecond' * s.delay_ms
                           ELSE now() + make_interval(secs => $5::integer) END
  FROM s
 WHERE ($5::integer IS NOT NULL OR s.delay_ms IS NOT NULL)
   AND p.handler = $1::text AND p.event_id = s.event_id AND p.lease_token = s.token
