-- dead_purge: delete the dead letters the filters choose (never events), for
-- outboxctl dead purge. $1-$9: the filters (src/outboxctl/cli.h).
-- The ledger rows stay dead: a purged event never runs again for that
-- handler, and the outbox row, if kept, is left as it is.
DELETE FROM /*schema*/dead_letters AS d
 USING /*schema*/dead_letters_matching($1::text, $2::text, $3::text, $4::uuid, $5::timestamptz,
                                       $6::timestamptz, $7::text, $8::uuid[], $9::bigint,
                                       false) AS m
 WHERE d.event_id = m.event_id AND d.handler = m.handler
RETURNING d.event_id, d.handler, d.reason, d.attempts, d.dead_at
