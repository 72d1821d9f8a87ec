-- wake_successors: after a batch's publish, make the rows that waited for
-- these heads due now (migration 0016).
-- $1: aggregate types (text[]); $2: aggregate ids (uuid[]); $3: the numbers
-- just published (bigint[]), one element per published ordered row.
-- Wakes every later number of each aggregate that waits for its head; the
-- row lease then takes them as a run, and leaves any that still wait. A row
-- backing off after a failed publish is not waiting for its head, and
-- keeps its time.
UPDATE /*schema*/events AS w
   SET next_attempt_at = greatest(now(), w.created_at + interval '1 microsecond')
  FROM (SELECT aggregate_type, aggregate_id, min(aggregate_seq) AS aggregate_seq
          FROM unnest($1::text[], $2::uuid[], $3::bigint[])
               AS d(aggregate_type, aggregate_id, aggregate_seq)
         GROUP BY 1, 2) AS d
 WHERE w.aggregate_type = d.aggregate_type AND w.aggregate_id = d.aggregate_id
   AND w.aggregate_seq > d.aggregate_seq
   AND w.status = 'pending' AND w.last_error = 'waiting_for_head'
   AND w.next_attempt_at > now()
