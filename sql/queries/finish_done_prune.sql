-- finish_done_prune: the common case in prune mode, every row of a lease published.
-- $1: lease token; $2: ids (uuid[]).
-- Deletes the rows the token still holds; the caller counts the others as
-- lost (their lease ran out and another relay holds them now).
DELETE FROM /*schema*/events
 WHERE id = ANY ($2::uuid[]) AND lease_token = $1::uuid AND status = 'leased'
