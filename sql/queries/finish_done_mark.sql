-- finish_done_mark: the common case in mark mode, every row of a lease published.
-- $1: lease token; $2: ids (uuid[]); $3: the PubAcks' stream sequences (bigint[],
-- one per id, NULL elements or a NULL array when unknown).
-- Marks the rows the token still holds done, kept for replay until
-- prune_done removes them, with the sequence the stream stored each at; the
-- caller counts the others as lost.
WITH claim AS (
    -- A window claim's rows are held while its claim row is; deleting it
    -- here fences a holder whose claim ran out (given back, leased again).
    DELETE FROM /*schema*/relay_claims WHERE token = $1::uuid RETURNING token
)
UPDATE /*schema*/events AS e
   SET status = 'done', published_at = now(), leased_until = NULL, lease_token = NULL,
           -- A row that came back leaves the retries' index; a fresh one keeps
           -- its value, so no indexed column changes and the update is HOT.
           next_attempt_at = least(e.next_attempt_at, e.created_at),
       stream_seq = s.seq
  FROM unnest($2::uuid[], $3::bigint[]) AS s(id, seq)
 WHERE e.id = s.id
   AND (e.lease_token = $1::uuid AND e.status = 'leased'
        OR e.status = 'pending' AND EXISTS (SELECT 1 FROM claim))
