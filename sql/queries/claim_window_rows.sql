-- claim_window_rows: the rows of a window claim (claim_window.sql), read
-- after its transaction committed, in lease_batch.sql's columns (none
-- quarantined or taken over here: claim_takeover.sql counts those).
-- $1: the claim's token.
-- The rows are the claim's until it runs out, so no other relay changes
-- them between the commit and this read. Its ids are in the order the
-- rows go out: each found by the primary key, whatever the table's size.
SELECT e.id, e.envelope::text AS envelope, e.attempts, c.token AS lease_token,
       false AS quarantined, e.lease_expiries, false AS taken_over, e.event_type,
       e.aggregate_type, e.aggregate_id::text AS aggregate_id, e.tenant_id, e.data_subject,
       e.aggregate_seq
  FROM /*schema*/relay_claims AS c
 CROSS JOIN LATERAL unnest(c.ids) WITH ORDINALITY AS u(id, ord)
  JOIN /*schema*/events AS e ON e.id = u.id
 WHERE c.token = $1::uuid
 ORDER BY u.ord
