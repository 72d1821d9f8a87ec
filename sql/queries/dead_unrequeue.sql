-- dead_unrequeue: a requeue whose publish failed is taken back, so the dead
-- letter is listed (and requeued by the next run) as waiting again; its
-- ledger row stays claimable. $1: event ids (uuid[]); $2: handlers (text[]).
UPDATE /*schema*/dead_letters AS d
   SET requeued_at = NULL
  FROM unnest($1::uuid[], $2::text[]) AS i(event_id, handler)
 WHERE d.event_id = i.event_id AND d.handler = i.handler
