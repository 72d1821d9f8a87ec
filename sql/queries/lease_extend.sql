-- lease_extend: push back the end of one held lease, for work that outlasts it.
-- $1: lease token; $2: row id; $3: lease seconds from now.
-- Guarded like every write after a lease: a row whose lease ran out and
-- was leased again (another token) is not touched. A window claim
-- (claim_window.sql) is extended whole, while its claim row is there and
-- holds the row. Returns 1 when the row is still held, else 0.
WITH claim AS (
    UPDATE /*schema*/relay_claims
       SET expires_at = now() + make_interval(secs => $3)
     WHERE token = $1::uuid AND $2::uuid = ANY (ids)
    RETURNING 1
), leased AS (
    UPDATE /*schema*/events
       SET leased_until = now() + make_interval(secs => $3)
     WHERE id = $2::uuid AND lease_token = $1::uuid AND status = 'leased'
    RETURNING 1
)
SELECT (SELECT count(*) FROM claim) + (SELECT count(*) FROM leased) AS held
