-- ledger_record_failure: count one handler failure and schedule the next
-- try, or dead-letter (event, handler) at max attempts.
-- $1: event id; $2: handler; $3: owner token of the claim; $4: reason;
-- $5: envelope (JSON text, or NULL); $6: max attempts;
-- $7, $8: backoff base and cap in ms.
-- ledger_fail() (migration 0018) does it, as the SQL API's fail() does:
-- the claim row ours (token $3, in progress): attempts + 1, owner
-- cleared. No row at all (the claim was rolled back with the handler's
-- effects): recreated with attempts 1. Any other row - done, or claimed by
-- someone else since - is left alone and nothing comes back, so a failure
-- never counts twice and never touches a done row. retry_ms is the delay
-- the database chose (backoff_ms with jitter), next_attempt_at - now().
SELECT f.attempts,
       f.dead_at IS NOT NULL AS dead,
       coalesce(round(extract(epoch FROM f.next_attempt_at - now()) * 1000), 0)::bigint AS retry_ms
  FROM /*schema*/ledger_fail($1::uuid, $2::text, $3::uuid, $4::text, $5::text, $6::integer,
                             $7::integer, $8::integer) AS f
