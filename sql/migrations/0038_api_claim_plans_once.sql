-- 0038_api_claim_plans_once: try_claim() and claim() plan their statements
-- once per session and probe by key.
--
-- Both claim one event through api_claim(), which runs the claim the
-- consumer daemon runs for a batch: ledger_claim_ordered() for an ordered
-- event, ledger_claim() for the rest, a dozen statements built for arrays
-- of hundreds. Under the default plan_cache_mode each of them got a custom
-- plan on every call (their generic plans, priced for arrays of unknown
-- length, cost more on paper than a plan for one element), and planning
-- them was most of the call: outbox-bench consume --case try_claim measured
-- 1.5 ms of PostgreSQL CPU an event for try_claim() and its effect's
-- INSERT in one transaction, against 0.15 ms for the INSERT alone.
--
-- One event is always one element, so api_claim() now asks for the generic
-- plans (kept for the session after the first call), with sequential and
-- bitmap scans off so that each generic plan reads by key, as the relay's
-- functions do (0029), and JIT off with them. A SET clause holds for the
-- call only: the daemon's batches, and the caller's own statements, keep
-- their settings. A later migration that re-creates api_claim() must
-- repeat these clauses.

ALTER FUNCTION /*schema*/api_claim(uuid, text, integer, boolean, jsonb)
    SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off;
