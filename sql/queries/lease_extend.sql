-- lease_extend: push back the end of one held lease, for work that outlasts it.
-- $1: lease token; $2: row id; $3: lease seconds from now.
-- Guarded like every write after a lease: a row whose lease ran out and
-- was leased again (another token) is not touched; 0 rows tells the caller.
UPDATE /*schema*/events
   SET leased_until = now() + make_interval(secs => $3)
 WHERE id = $2::uuid AND lease_token = $1::uuid AND status = 'leased'
