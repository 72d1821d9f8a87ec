-- ledger_parked_fill: gives the events an ordered claim parked without
-- their messages (ledger_claim_ordered.sql with $9-$11 NULL) their message
-- id, subject and envelope, in the claim's transaction, so no parked row
-- is ever seen without them. A claim carries the messages only when it may
-- park (see obx_ledger_claim): most batches park nothing, and the
-- envelopes are nearly all of a claim's bytes.
-- $1: handler; per parked event: $2 id (uuid[]), $3 message id, $4
-- subject, $5 envelope (text[]).
UPDATE /*schema*/parked_events AS p
   SET message_id = f.message_id, subject = f.subject, envelope = f.envelope
  FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[])
       AS f(event_id, message_id, subject, envelope)
 WHERE p.handler = $1::text AND p.event_id = f.event_id
