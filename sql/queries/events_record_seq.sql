-- events_record_seq: the stream sequences of rows outboxctl published again
-- (replay, audit --repair), so trace and the next audit find them.
-- $1: ids (uuid[]); $2: sequences (bigint[], same order).
UPDATE /*schema*/events AS e
   SET stream_seq = s.seq
  FROM unnest($1::uuid[], $2::bigint[]) AS s(id, seq)
 WHERE e.id = s.id AND e.status = 'done'
