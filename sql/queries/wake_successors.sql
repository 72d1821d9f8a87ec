-- wake_successors: after a batch's publish, make the rows that waited for
-- these heads due now (migration 0016).
-- $1: aggregate types (text[]); $2: aggregate ids (uuid[]); $3: the numbers
-- just published (bigint[]), one element per published ordered row; $4: how
-- many numbers after the last published to wake (the relay's batch).
-- Wakes the next $4 numbers of each aggregate that wait for their head; the
-- row lease takes them as a run, and leaves any that still wait. Waking more
-- than a batch would only make the row lease look at them too early. A row
-- backing off after a failed publish is not waiting for its head, and
-- keeps its time.
UPDATE /*schema*/events AS w
   -- Due now, in number order (a microsecond apart), so that the row lease,
   -- which takes the earliest due first, takes an aggregate's run from its
   -- lowest number; after created_at, so the row stays in the retries' index.
   SET next_attempt_at = greatest(w.created_at, now() - interval '1 second')
                         + interval '1 microsecond' * (w.aggregate_seq - d.aggregate_seq)
  FROM (SELECT aggregate_type, aggregate_id, max(aggregate_seq) AS aggregate_seq
          FROM unnest($1::text[], $2::uuid[], $3::bigint[])
               AS d(aggregate_type, aggregate_id, aggregate_seq)
         GROUP BY 1, 2) AS d
 WHERE w.aggregate_type = d.aggregate_type AND w.aggregate_id = d.aggregate_id
   AND w.aggregate_seq > d.aggregate_seq AND w.aggregate_seq <= d.aggregate_seq + $4::bigint
   AND w.status = 'pending' AND w.last_error = 'waiting_for_head'
   AND w.next_attempt_at > now()
   -- Nothing waits, the usual case: one read of the empty index, no lookups.
   AND EXISTS (SELECT 1 FROM /*schema*/events AS x WHERE x.last_error = 'waiting_for_head')
