-- ledger_record_failure: count one handler failure and schedule the next
-- try, or dead-letter (event, handler) at max attempts.
-- $1: event id; $2: handler; $3: owner token of the claim; $4: reason;
-- $5: envelope (JSON text, or NULL); $6: max attempts;
-- $7, $8: backoff base and cap in ms.
-- The claim row ours (token $3, in progress): attempts + 1, owner
-- cleared. No row at all (the claim was rolled back with the handler's
-- effects): recreated with attempts 1. Any other row - done, or claimed by
-- someone else since - is left alone and nothing comes back, so a failure
-- never counts twice and never touches a done row. retry_ms is the delay
-- the database chose (backoff_ms with jitter), next_attempt_at - now().
WITH failed AS (
    UPDATE /*schema*/processed_events AS p
       SET attempts = p.attempts + 1,
           last_error = $4::text,
           owner_token = NULL,
           claimed_until = NULL,
           next_attempt_at =
               CASE WHEN p.attempts + 1 >= $6::integer THEN NULL
                    ELSE now() + interval '1 millisecond'
                                 * /*schema*/backoff_ms(p.attempts + 1, $7::integer, $8::integer,
                                                        random())
               END,
           dead_at = CASE WHEN p.attempts + 1 >= $6::integer THEN now() END
     WHERE p.event_id = $1::uuid AND p.handler = $2::text
       AND p.owner_token = $3::uuid AND p.status = 'in_progress'
    RETURNING p.event_id, p.attempts, p.next_attempt_at, p.dead_at
), recreated AS (
    INSERT INTO /*schema*/processed_events AS p (event_id, handler, attempts, last_error,
                                                 next_attempt_at, dead_at)
    SELECT $1::uuid, $2::text, 1, $4::text,
           CASE WHEN 1 >= $6::integer THEN NULL
                ELSE now() + interval '1 millisecond'
                             * /*schema*/backoff_ms(1, $7::integer, $8::integer, random())
           END,
           CASE WHEN 1 >= $6::integer THEN now() END
     WHERE NOT EXISTS (SELECT 1
                         FROM /*schema*/processed_events AS q
                        WHERE q.event_id = $1::uuid AND q.handler = $2::text)
        ON CONFLICT (event_id, handler) DO NOTHING
    RETURNING p.event_id, p.attempts, p.next_attempt_at, p.dead_at
), outcome AS (
    SELECT * FROM failed
    UNION ALL
    SELECT * FROM recreated
), letter AS (
    INSERT INTO /*schema*/dead_letters AS d (event_id, handler, envelope, reason, attempts)
    SELECT o.event_id, $2::text, /*schema*/jsonb_or_null($5::text), $4::text, o.attempts
      FROM outcome AS o
     WHERE o.dead_at IS NOT NULL
        ON CONFLICT (event_id, handler) DO UPDATE
       SET envelope = excluded.envelope, reason = excluded.reason,
           attempts = excluded.attempts, dead_at = now(), requeued_at = NULL
)
SELECT o.attempts,
       o.dead_at IS NOT NULL AS dead,
       coalesce(round(extract(epoch FROM o.next_attempt_at - now()) * 1000), 0)::bigint AS retry_ms
  FROM outcome AS o
