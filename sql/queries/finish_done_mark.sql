-- finish_done_mark: the common case in mark mode, every row of a lease published.
-- $1: lease token; $2: ids (uuid[]).
-- Marks the rows the token still holds done, kept for replay until
-- prune_done removes them; the caller counts the others as lost.
UPDATE /*schema*/events
   SET status = 'done', published_at = now(), leased_until = NULL, lease_token = NULL
 WHERE id = ANY ($2::uuid[]) AND lease_token = $1::uuid AND status = 'leased'
