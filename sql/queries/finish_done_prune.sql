-- finish_done_prune: the common case in prune mode, every row of a lease published.
-- $1: lease token; $2: ids (uuid[]).
-- Deletes the rows the token still holds (a row lease's, or a window
-- claim's while its claim row is there); the caller counts the others as
-- lost (their lease ran out and another relay holds them now).
WITH claim AS (
    -- A window claim's rows are held while its claim row is; deleting it
    -- here fences a holder whose claim ran out (given back, leased again).
    DELETE FROM /*schema*/relay_claims WHERE token = $1::uuid RETURNING token
)
DELETE FROM /*schema*/events AS e
 WHERE e.id = ANY ($2::uuid[])
   AND (e.lease_token = $1::uuid AND e.status = 'leased'
        OR e.status = 'pending' AND EXISTS (SELECT 1 FROM claim))
