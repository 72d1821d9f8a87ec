-- dead_requeue: make the chosen dead letters, not yet requeued nor skipped
-- (dead_skip.sql), run once more.
-- $1-$9: the filters (src/outboxctl/cli.h); $10: the backend of a handler no
-- consumer registered in handlers ('jetstream' or 'db').
-- For each: the dead letter records the requeue (requeued_at, requeue_count);
-- a handler's ledger row gets its attempts back and is claimable again (not
-- dead, no backoff), so the ledger lets it run once and never twice; the
-- relay's (handler '') and a DB-backend handler's event is made due again
-- in the outbox: a dead row pending with its attempts and lease expiries
-- reset, a handled one pending again (the DB feed offers it to every
-- handler; those done skip it), a pruned one written back from the dead
-- letter's envelope (with its aggregate_seq, if it had one: the event keeps
-- its number, migration 0014). A JetStream handler's event is published again by the
-- caller after this commits (via_stream), under a message id the duplicate
-- window has not seen. Returns one row per dead letter requeued.
WITH chosen AS MATERIALIZED (
    SELECT d.event_id, d.handler, d.envelope
      FROM /*schema*/dead_letters_matching($1::text, $2::text, $3::text, $4::uuid,
                                           $5::timestamptz, $6::timestamptz, $7::text,
                                           $8::uuid[], $9::bigint, true) AS m
      JOIN /*schema*/dead_letters AS d USING (event_id, handler)
     -- A skipped event stays skipped: the events behind it went out first.
     WHERE NOT EXISTS (SELECT 1 FROM /*schema*/aggregate_skips AS k
                        WHERE k.event_id = d.event_id AND k.handler = d.handler)
       FOR UPDATE OF d
), routed AS MATERIALIZED (
    SELECT c.event_id, c.handler, c.envelope,
           c.handler = '' OR 'db' = ANY (b.backends) AS via_table,
           c.handler <> '' AND 'jetstream' = ANY (b.backends) AS via_stream
      FROM chosen AS c
     CROSS JOIN LATERAL (
           SELECT coalesce(array_agg(DISTINCT h.backend), ARRAY[$10::text]) AS backends
             FROM /*schema*/handlers AS h
            WHERE h.name = c.handler) AS b
), marked AS (
    UPDATE /*schema*/dead_letters AS d
       SET requeued_at = now(), requeue_count = d.requeue_count + 1
      FROM routed AS r
     WHERE d.event_id = r.event_id AND d.handler = r.handler
    RETURNING d.event_id, d.handler, d.requeue_count
), ledger AS (
    UPDATE /*schema*/processed_events AS p
       SET attempts = 0, dead_at = NULL, next_attempt_at = NULL, owner_token = NULL,
           claimed_until = NULL
      FROM routed AS r
     WHERE p.event_id = r.event_id AND p.handler = r.handler AND r.handler <> ''
       AND p.status = 'in_progress'
    RETURNING p.event_id, p.handler
), due AS MATERIALIZED (
    SELECT DISTINCT ON (r.event_id) r.event_id, r.envelope, bool_or(r.handler = '')
               OVER (PARTITION BY r.event_id) AS relay
      FROM routed AS r
     WHERE r.via_table
     ORDER BY r.event_id
), reset AS (
    UPDATE /*schema*/events AS e
       SET status = 'pending', attempts = 0, lease_expiries = 0, next_attempt_at = now(),
           published_at = NULL, leased_until = NULL, lease_token = NULL, stream_seq = NULL
      FROM due AS u
     WHERE e.id = u.event_id
       AND ((u.relay AND e.status = 'dead') OR (NOT u.relay AND e.status = 'done'))
    RETURNING e.id
), restored AS (
    INSERT INTO /*schema*/events (id, aggregate_type, aggregate_id, event_type, tenant_id,
                                  data_subject, envelope, aggregate_seq)
    SELECT u.event_id, u.envelope ->> 'aggregate_type', (u.envelope ->> 'aggregate_id')::uuid,
           u.envelope ->> 'event_type', u.envelope ->> 'tenant_id',
           u.envelope ->> 'data_subject', u.envelope, (u.envelope ->> 'aggregate_seq')::bigint
      FROM due AS u
     WHERE u.envelope IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM /*schema*/events AS e WHERE e.id = u.event_id)
        ON CONFLICT (id) DO NOTHING
    RETURNING id
)
SELECT r.event_id, r.handler, m.requeue_count, r.via_table, r.via_stream,
       EXISTS (SELECT 1 FROM ledger AS l
                WHERE l.event_id = r.event_id AND l.handler = r.handler) AS ledger_reset,
       EXISTS (SELECT 1 FROM reset AS x WHERE x.id = r.event_id) AS row_reset,
       EXISTS (SELECT 1 FROM restored AS x WHERE x.id = r.event_id) AS row_restored,
       r.envelope IS NOT NULL OR EXISTS (SELECT 1 FROM /*schema*/events AS e
                                          WHERE e.id = r.event_id) AS has_envelope
  FROM routed AS r
  JOIN marked AS m USING (event_id, handler)
 ORDER BY r.event_id, r.handler
