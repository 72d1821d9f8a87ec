-- 0017_handler_order: a handler runs an aggregate's event n only after
-- n - 1 is done (or skipped) for that handler, checked in the ledger's
-- transaction under a row lock, whatever order the broker delivers in.
--
-- JetStream on 2.9 does not keep a key's order across a shared durable
-- consumer, naks and redeliveries, and the DB feed leases rows to
-- replicas side by side, so the order cannot be the feed's: it is the
-- ledger's. Per (handler, aggregate) the ledger keeps the last number done
-- (handler_progress). A claim of an ordered event (one with an
-- aggregate_seq, migration 0014) locks that row first; the event runs when
-- its predecessor is done or every number between is skipped
-- (aggregate_skips, 0015), and is otherwise parked: kept here with what is
-- needed to run it later without the broker (parked_events), and acked.
-- The done mark moves the progress row on in the same transaction, so a
-- replica finishing n and another claiming n + 1 meet on the row lock: the
-- claim either sees n done and runs n + 1, or parks it and commits first,
-- and then the finisher's sweep (after its commit) finds it parked.
--
-- Events without a number (unordered; aggregate_id the nil UUID, or a
-- schema with ordering off) never come here: the consumer claims and marks
-- them with the statements of 0005 as before.

-- Per handler and aggregate: the last aggregate_seq the handler is done
-- with. Never pruned (retention keeps it): it is the order's memory, one
-- small row per handler and aggregate. last_seq is in no index, so moving
-- it on is a HOT update.
CREATE TABLE /*schema*/handler_progress (
    handler        text        NOT NULL,
    aggregate_type text        NOT NULL,
    aggregate_id   uuid        NOT NULL,
    last_seq       bigint      NOT NULL CHECK (last_seq >= 0),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (handler, aggregate_type, aggregate_id)
) WITH (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);

-- When each handler's order began. A handler that starts after an
-- aggregate's events went out is never given them (they were consumed, or
-- pruned, before it existed), so its first event of that aggregate must
-- not wait for them. At a handler's first registration (or its first
-- ordered claim, whichever comes first) each aggregate's last number
-- already out is copied into handler_progress as where the handler's order
-- starts: the number before its lowest unpublished event, or its last
-- number if none is unpublished. Events up to it run without the order
-- check (once each, like unordered events), the rest in order: an event
-- still in the outbox, a dead head among them, is waited for.
CREATE TABLE /*schema*/handler_baselines (
    handler    text        PRIMARY KEY,
    taken_at   timestamptz NOT NULL DEFAULT now(),
    aggregates bigint      NOT NULL DEFAULT 0
);

-- Early events: delivered before their predecessor was done for the
-- handler. Acked on the feed; run from here by whichever replica's sweep
-- finds the predecessor done (after its own done commit, and every
-- second). message_id and subject are the message's as delivered (the
-- consumer's message check reads them again); envelope is its body, as
-- text, byte for byte. A sweep leases a row (lease_token, leased_until)
-- while it runs it; a new park of the same event clears the lease, so
-- that sweep's ack removes nothing. The row goes when the handler is done
-- with the event (or it is dead-lettered), and with the ledger row at the
-- latest (ledger_prune.sql).
CREATE TABLE /*schema*/parked_events (
    handler        text        NOT NULL,
    event_id       uuid        NOT NULL,
    aggregate_type text        NOT NULL,
    aggregate_id   uuid        NOT NULL,
    aggregate_seq  bigint      NOT NULL CHECK (aggregate_seq >= 1),
    message_id     text        NOT NULL,
    subject        text        NOT NULL,
    envelope       text        NOT NULL,
    parked_at      timestamptz NOT NULL DEFAULT now(),
    lease_token    uuid,
    leased_until   timestamptz,
    PRIMARY KEY (handler, event_id)
);
CREATE INDEX parked_events_aggregate_idx
    ON /*schema*/parked_events (handler, aggregate_type, aggregate_id, aggregate_seq);

REVOKE ALL ON /*schema*/handler_progress, /*schema*/handler_baselines, /*schema*/parked_events
    FROM PUBLIC;

-- Takes `baseline_handler`'s baseline if it has none: every aggregate's
-- last number out (above; aggregate_heads and the unpublished events, as
-- committed now) becomes where the handler's order starts. Returns true if it took one now. Two replicas
-- taking it at once meet on the baselines row: the second waits, then
-- finds it taken. A writer's transaction still open holds its numbers
-- uncommitted, so they are after the baseline and run in order.
-- SECURITY DEFINER: consumers may not read aggregate_heads.
CREATE FUNCTION /*schema*/ledger_order_baseline(baseline_handler text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    copied bigint;
BEGIN
    INSERT INTO /*schema*/handler_baselines AS b (handler) VALUES (baseline_handler)
        ON CONFLICT (handler) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO /*schema*/handler_progress (handler, aggregate_type, aggregate_id, last_seq)
    SELECT baseline_handler, h.aggregate_type, h.aggregate_id,
           coalesce(u.first_unpublished - 1, h.last_seq)
      FROM /*schema*/aggregate_heads AS h
      LEFT JOIN (SELECT e.aggregate_type, e.aggregate_id, min(e.aggregate_seq) AS first_unpublished
                   FROM /*schema*/events AS e
                  WHERE e.published_at IS NULL AND e.aggregate_seq IS NOT NULL
                  GROUP BY e.aggregate_type, e.aggregate_id) AS u
             ON u.aggregate_type = h.aggregate_type AND u.aggregate_id = h.aggregate_id
        ON CONFLICT (handler, aggregate_type, aggregate_id) DO NOTHING;
    GET DIAGNOSTICS copied = ROW_COUNT;
    UPDATE /*schema*/handler_baselines SET aggregates = copied WHERE handler = baseline_handler;
    RETURN true;
END
$fn$;
REVOKE ALL ON FUNCTION /*schema*/ledger_order_baseline(text) FROM PUBLIC;

-- True when an event numbered `seq` may run for `ready_handler` after
-- `done_seq`: it is the next, or every number between is skipped, for every
-- handler (handler '', the relay's dead letter skipped) or for this one.
-- STABLE: reads aggregate_skips.
CREATE FUNCTION /*schema*/ledger_order_ready(ready_handler text, ready_type text, ready_id uuid,
                                             done_seq bigint, seq bigint)
RETURNS boolean LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT seq <= done_seq + 1
        OR (SELECT count(DISTINCT k.aggregate_seq)
              FROM /*schema*/aggregate_skips AS k
             WHERE k.aggregate_type = ready_type AND k.aggregate_id = ready_id
               AND k.handler IN ('', ready_handler)
               AND k.aggregate_seq > done_seq AND k.aggregate_seq < seq) = seq - done_seq - 1
$fn$;

-- The claim of a batch with ordered events (0005's ledger_claim for the
-- rest). Per element of claim_ids, the same columns as 0005's, with one
-- more state: 'parked' (an early event, now in parked_events: ack it).
-- claim_types, claim_aggregates and claim_seqs give each event's
-- aggregate and number (seq NULL: unordered); claim_message_ids,
-- claim_subjects and claim_envelopes what a parked event needs to run
-- later. Per aggregate of the batch, in one order (so batches wait for
-- each other instead of deadlocking), its progress row is made if missing
-- and locked for the rest of the caller's transaction; then, in seq order:
--   seq <= progress: before the handler's baseline, or done already: the
--     plain claim decides (run once, or done);
--   the first event that is ready (its predecessor done or skipped): the
--     plain claim decides (run, busy, backoff, dead);
--   with claim_done, the events that follow it without a gap (or past
--     skipped numbers), later in the batch too, never claimed before: they
--     run after it in the same transaction, which commits only if every
--     handler of the batch returned DONE, so the run is done whole or not
--     at all. If the plain claim does not let one of them run, the ones
--     after it are given back (their fresh claims deleted) and parked;
--   every later one: parked, since it may run only once the one before is
--     done, which is after this transaction.
-- A progress row another transaction holds past claim_lock_wait_ms makes
-- its aggregate's events busy (look again in a second), like a held claim.
-- claim_done (a transactional batch's fast path): the claims are written
-- done, and the progress rows move on here, in the same transaction.
CREATE FUNCTION /*schema*/ledger_claim_ordered(claim_handler text, claim_ids uuid[],
                                               claim_lease_seconds integer,
                                               claim_lock_wait_ms integer, claim_done boolean,
                                               claim_types text[], claim_aggregates uuid[],
                                               claim_seqs bigint[], claim_message_ids text[],
                                               claim_subjects text[], claim_envelopes text[])
RETURNS TABLE (event_id uuid, state text, attempts integer, defer_ms bigint, owner_token uuid)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '1s' -- replaced below; the clause scopes the change to the call
AS $fn$
#variable_conflict use_column
DECLARE
    parked uuid[] := '{}';
    busy uuid[] := '{}';
    held_types text[] := '{}';
    held_ids uuid[] := '{}';
    claim_sub uuid[];
    res_states text[];
    res_attempts integer[];
    res_defers bigint[];
    res_tokens uuid[];
    r record;
    cur_type text;
    cur_id uuid;
    done_seq bigint;
    gate_open boolean;
    run_seq bigint;          -- the last number let run in the current aggregate
    run_ord bigint;          -- its place in the batch
    in_run uuid[] := '{}';   -- every event let run, per aggregate in seq order
    in_run_key text[] := '{}';
    follows uuid[] := '{}';  -- those let run after the first of their aggregate
    undone uuid[] := '{}';   -- followers given back after the claim: parked
    cur_key text;
    broken boolean;
    i integer;
BEGIN
    PERFORM set_config('lock_timeout', greatest(claim_lock_wait_ms, 1) || 'ms', true);
    IF NOT EXISTS (SELECT FROM /*schema*/handler_baselines AS b
                    WHERE b.handler = claim_handler) THEN
        PERFORM /*schema*/ledger_order_baseline(claim_handler);
    END IF;
    -- Every aggregate's progress row, made and locked in one order.
    BEGIN
        INSERT INTO /*schema*/handler_progress AS g (handler, aggregate_type, aggregate_id, last_seq)
        SELECT DISTINCT claim_handler, u.t, u.a, 0
          FROM unnest(claim_types, claim_aggregates, claim_seqs) AS u(t, a, s)
         WHERE u.s IS NOT NULL
         ORDER BY 2, 3
            ON CONFLICT (handler, aggregate_type, aggregate_id) DO NOTHING;
        PERFORM 1
           FROM /*schema*/handler_progress AS g
          WHERE g.handler = claim_handler
            AND (g.aggregate_type, g.aggregate_id) IN (
                    SELECT u.t, u.a
                      FROM unnest(claim_types, claim_aggregates, claim_seqs) AS u(t, a, s)
                     WHERE u.s IS NOT NULL)
          ORDER BY g.aggregate_type, g.aggregate_id
            FOR UPDATE;
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        -- Undone: take them one by one, each waited for 1 ms; the held ones are busy.
        PERFORM set_config('lock_timeout', '1ms', true);
        FOR r IN SELECT DISTINCT u.t, u.a
                   FROM unnest(claim_types, claim_aggregates, claim_seqs) AS u(t, a, s)
                  WHERE u.s IS NOT NULL
                  ORDER BY 1, 2 LOOP
            BEGIN
                INSERT INTO /*schema*/handler_progress AS g (handler, aggregate_type, aggregate_id,
                                                             last_seq)
                VALUES (claim_handler, r.t, r.a, 0)
                    ON CONFLICT (handler, aggregate_type, aggregate_id) DO NOTHING;
                PERFORM 1 FROM /*schema*/handler_progress AS g
                  WHERE g.handler = claim_handler AND g.aggregate_type = r.t
                    AND g.aggregate_id = r.a
                    FOR UPDATE;
            EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
                held_types := held_types || r.t;
                held_ids := held_ids || r.a;
            END;
        END LOOP;
        PERFORM set_config('lock_timeout', greatest(claim_lock_wait_ms, 1) || 'ms', true);
    END;
    -- The order check, per aggregate in seq order; a repeated id counts once.
    FOR r IN SELECT o.id, o.t, o.a, o.s, o.mid, o.subj, o.env, o.ord
               FROM (SELECT DISTINCT ON (u.id) u.id, u.t, u.a, u.s, u.mid, u.subj, u.env, u.ord
                       FROM unnest(claim_ids, claim_types, claim_aggregates, claim_seqs,
                                   claim_message_ids, claim_subjects, claim_envelopes)
                            WITH ORDINALITY AS u(id, t, a, s, mid, subj, env, ord)
                      WHERE u.s IS NOT NULL
                      ORDER BY u.id, u.ord) AS o
              ORDER BY o.t, o.a, o.s, o.id LOOP
        IF EXISTS (SELECT FROM unnest(held_types, held_ids) AS x(t, a)
                    WHERE x.t = r.t AND x.a = r.a) THEN
            busy := busy || r.id;
            CONTINUE;
        END IF;
        IF cur_type IS DISTINCT FROM r.t OR cur_id IS DISTINCT FROM r.a THEN
            cur_type := r.t;
            cur_id := r.a;
            gate_open := true;
            SELECT g.last_seq INTO done_seq
              FROM /*schema*/handler_progress AS g
             WHERE g.handler = claim_handler AND g.aggregate_type = r.t AND g.aggregate_id = r.a;
            run_seq := NULL;
        END IF;
        IF r.s <= done_seq THEN
            CONTINUE; -- the plain claim decides
        ELSIF gate_open AND run_seq IS NULL
              AND /*schema*/ledger_order_ready(claim_handler, r.t, r.a, done_seq, r.s) THEN
            run_seq := r.s; -- the first: the plain claim decides
            run_ord := r.ord;
            in_run := in_run || r.id;
            in_run_key := in_run_key || (r.t || '/' || r.a::text);
            CONTINUE;
        ELSIF gate_open AND run_seq IS NOT NULL AND claim_done AND r.ord > run_ord
              AND NOT EXISTS (SELECT FROM /*schema*/processed_events AS q
                               WHERE q.event_id = r.id AND q.handler = claim_handler)
              AND /*schema*/ledger_order_ready(claim_handler, r.t, r.a, run_seq, r.s) THEN
            run_seq := r.s; -- runs after the one before, in this transaction
            run_ord := r.ord;
            in_run := in_run || r.id;
            in_run_key := in_run_key || (r.t || '/' || r.a::text);
            follows := follows || r.id;
            CONTINUE;
        END IF;
        gate_open := false;
        parked := parked || r.id;
        INSERT INTO /*schema*/parked_events AS p (handler, event_id, aggregate_type, aggregate_id,
                                                  aggregate_seq, message_id, subject, envelope)
        VALUES (claim_handler, r.id, r.t, r.a, r.s, coalesce(r.mid, r.id::text),
                coalesce(r.subj, ''), coalesce(r.env, ''))
            ON CONFLICT (handler, event_id) DO UPDATE
           SET lease_token = NULL, leased_until = NULL;
    END LOOP;
    -- The rest through the plain claim, in input order.
    SELECT coalesce(array_agg(u.id ORDER BY u.ord), '{}') INTO claim_sub
      FROM unnest(claim_ids) WITH ORDINALITY AS u(id, ord)
     WHERE NOT (u.id = ANY (parked)) AND NOT (u.id = ANY (busy));
    SELECT array_agg(c.state ORDER BY c.ord), array_agg(c.attempts ORDER BY c.ord),
           array_agg(c.defer_ms ORDER BY c.ord), array_agg(c.owner_token ORDER BY c.ord)
      INTO res_states, res_attempts, res_defers, res_tokens
      FROM /*schema*/ledger_claim(claim_handler, claim_sub, claim_lease_seconds,
                                  claim_lock_wait_ms, claim_done)
           WITH ORDINALITY AS c(event_id, state, attempts, defer_ms, owner_token, ord);
    -- A follower runs only if every event before it in its run does: past
    -- the first that does not, the followers' fresh claims are given back
    -- and they are parked, to run once the one before is done.
    IF cardinality(follows) > 0 THEN
        FOR i IN 1 .. cardinality(in_run) LOOP
            IF cur_key IS DISTINCT FROM in_run_key[i] THEN
                cur_key := in_run_key[i];
                broken := false;
            END IF;
            IF broken AND in_run[i] = ANY (follows)
               AND res_states[array_position(claim_sub, in_run[i])] = 'run' THEN
                DELETE FROM /*schema*/processed_events AS q
                 WHERE q.event_id = in_run[i] AND q.handler = claim_handler;
                undone := undone || in_run[i];
                INSERT INTO /*schema*/parked_events AS p (handler, event_id, aggregate_type,
                                                          aggregate_id, aggregate_seq, message_id,
                                                          subject, envelope)
                SELECT claim_handler, u.id, u.t, u.a, u.s, coalesce(u.mid, u.id::text),
                       coalesce(u.subj, ''), coalesce(u.env, '')
                  FROM unnest(claim_ids, claim_types, claim_aggregates, claim_seqs,
                              claim_message_ids, claim_subjects, claim_envelopes)
                       AS u(id, t, a, s, mid, subj, env)
                 WHERE u.id = in_run[i]
                 LIMIT 1
                    ON CONFLICT (handler, event_id) DO UPDATE
                   SET lease_token = NULL, leased_until = NULL;
            ELSIF res_states[array_position(claim_sub, in_run[i])] IS DISTINCT FROM 'run' THEN
                broken := true;
            END IF;
        END LOOP;
    END IF;
    IF claim_done THEN
        UPDATE /*schema*/handler_progress AS g
           SET last_seq = x.s, updated_at = now()
          FROM (SELECT o.t, o.a, max(o.s) AS s
                  FROM unnest(claim_ids, claim_types, claim_aggregates, claim_seqs)
                       AS o(id, t, a, s)
                  JOIN unnest(claim_sub, res_states) AS z(id, state)
                    ON z.id = o.id AND z.state = 'run'
                 WHERE o.s IS NOT NULL AND NOT (o.id = ANY (undone))
                 GROUP BY o.t, o.a) AS x
         WHERE g.handler = claim_handler AND g.aggregate_type = x.t AND g.aggregate_id = x.a
           AND g.last_seq < x.s;
    END IF;
    RETURN QUERY
    WITH inp AS (
        SELECT u.id, u.ord, u.id = ANY (parked) AS is_parked, u.id = ANY (busy) AS is_busy,
               u.id = ANY (undone) AS is_undone
          FROM unnest(claim_ids) WITH ORDINALITY AS u(id, ord)
    ), sub AS (
        SELECT i.ord, row_number() OVER (ORDER BY i.ord) AS k
          FROM inp AS i
         WHERE NOT i.is_parked AND NOT i.is_busy
    )
    SELECT i.id,
           CASE WHEN i.is_parked OR i.is_undone THEN 'parked' WHEN i.is_busy THEN 'busy'
                ELSE res_states[s.k] END,
           CASE WHEN i.is_parked OR i.is_busy OR i.is_undone THEN 0 ELSE res_attempts[s.k] END,
           CASE WHEN i.is_parked OR i.is_undone THEN 0::bigint
                WHEN i.is_busy THEN 1000::bigint
                ELSE res_defers[s.k] END,
           CASE WHEN i.is_parked OR i.is_busy OR i.is_undone THEN NULL::uuid
                ELSE res_tokens[s.k] END
      FROM inp AS i
      LEFT JOIN sub AS s ON s.ord = i.ord
     ORDER BY i.ord;
END
$fn$;

-- Consumers of a database whose roles were made before this migration;
-- roles.sql grants them from now on.
DO $grant$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'outbox_consumer') THEN
        GRANT SELECT, INSERT, UPDATE ON /*schema*/handler_progress TO outbox_consumer;
        GRANT SELECT ON /*schema*/handler_baselines TO outbox_consumer;
        GRANT SELECT, INSERT, UPDATE, DELETE ON /*schema*/parked_events TO outbox_consumer;
        GRANT EXECUTE ON FUNCTION /*schema*/ledger_order_baseline(text) TO outbox_consumer;
        GRANT SELECT, INSERT, UPDATE, DELETE ON /*schema*/handler_progress,
              /*schema*/handler_baselines, /*schema*/parked_events TO outbox_admin;
    END IF;
END
$grant$;
