-- doctor_ordering: the parts of per-aggregate ordering (migration 0014), for
-- outboxctl doctor. trigger_state: pg_trigger.tgenabled of events_seq (D off,
-- A on, O only in origin sessions, R only in replica sessions), NULL when the
-- trigger is missing; heads_table: aggregate_heads exists; definer: the
-- trigger's function runs as its owner; owner_can_count: that owner may read
-- and write the counters (else every numbered insert fails); seq_index:
-- events_aggregate_seq_idx (0015) is there and valid (the relays look up
-- each aggregate's head through it); blocked: ordered aggregates held by a
-- dead or quarantined head, not skipped (0016).
WITH f AS (
    SELECT p.prosecdef, p.proowner FROM pg_catalog.pg_proc AS p
     WHERE p.oid = to_regprocedure('/*schema*/events_seq()')
), h AS (
    SELECT to_regclass('/*schema*/aggregate_heads') AS oid
)
SELECT (SELECT t.tgenabled::text FROM pg_catalog.pg_trigger AS t
         WHERE t.tgrelid = to_regclass('/*schema*/events') AND t.tgname = 'events_seq')
           AS trigger_state,
       (SELECT h.oid IS NOT NULL FROM h) AS heads_table,
       coalesce((SELECT f.prosecdef FROM f), false) AS definer,
       coalesce((SELECT has_table_privilege(f.proowner, h.oid, 'SELECT')
                        AND has_table_privilege(f.proowner, h.oid, 'INSERT')
                        AND has_table_privilege(f.proowner, h.oid, 'UPDATE')
                   FROM f, h WHERE h.oid IS NOT NULL), false) AS owner_can_count,
       coalesce((SELECT i.indisvalid FROM pg_catalog.pg_index AS i
                  WHERE i.indexrelid = to_regclass('/*schema*/events_aggregate_seq_idx')),
                false) AS seq_index,
       /*schema*/blocked_aggregates() AS blocked
