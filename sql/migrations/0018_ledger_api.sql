-- 0018_ledger_api: the consumer ledger as a public SQL API, so a service
-- in any language runs its handler once per event with the same ledger the
-- daemon's handlers use: the same rows (processed_events), the same
-- attempts, backoff and dead letters, the same per-aggregate order
-- (0017), seen the same way by outboxctl trace, dead and status.
--
--   try_claim(event_id, handler[, envelope])    in the caller's transaction:
--       true: run the effects in this transaction; the claim is written
--       done and commits with them, or vanishes with them at rollback
--       (exactly-once database effects). false: done already, or dead-lettered.
--   claim(event_id, handler, lease_seconds[, envelope]) -> owner token
--   renew(event_id, handler, token, lease_seconds) -> still ours?
--   complete(event_id, handler, token) -> done by us?
--   fail(event_id, handler, token, reason, ...) -> retry (when) or dead
--       for effects outside the database: the claim is a lease, fenced by
--       the token like the daemon's own claims, so a claimer whose lease
--       ran out and was taken over can no longer complete or fail it.
--
-- "Not now" is an error, not a false: a claim held by another live claimer
-- (SQLSTATE 55P03), an event backing off after a failure, or an ordered
-- event whose predecessor is not done for this handler (55000) must be
-- delivered again later (nak it with a delay). The error's DETAIL says
-- when: "retry_after_ms=N". A false would have the caller ack it and lose it.
--
-- Ordered events: the event's number comes from its envelope (the message
-- body, which carries aggregate_type, aggregate_id and aggregate_seq), so
-- pass it. Without it, on a schema with ordering on, the functions refuse
-- (22023): the outbox row may be gone, and an event run out of order
-- cannot be undone.

-- The aggregate and number of an ordered claim taken by claim(), for
-- complete() to move the handler's progress on (the daemon carries them in
-- its batch instead). A row lives while its claim does: complete() and
-- fail() remove it, a takeover's claim() writes it again, and ledger
-- retention removes any a crashed claimer left.
CREATE TABLE /*schema*/claim_orders (
    event_id       uuid   NOT NULL,
    handler        text   NOT NULL,
    aggregate_type text   NOT NULL,
    aggregate_id   uuid   NOT NULL,
    aggregate_seq  bigint NOT NULL CHECK (aggregate_seq >= 1),
    PRIMARY KEY (event_id, handler)
);
REVOKE ALL ON /*schema*/claim_orders FROM PUBLIC;

-- Refuses, with SQLSTATE 22023 and a message naming the argument and its
-- value, an event id or handler name the API cannot take.
CREATE FUNCTION /*schema*/api_check(a_event_id uuid, a_handler text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF a_event_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'event_id is required';
    END IF;
    IF a_handler IS NULL OR a_handler !~ '^[A-Za-z0-9_.-]{1,64}$' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('handler %s is not a handler name: 1 to 64 of A-Z a-z 0-9 _ . -',
                             coalesce(quote_literal(a_handler), 'NULL'));
    END IF;
END
$fn$;

-- Checks the arguments of a claim and reads the event's place in its
-- aggregate from `envelope` (NULLs: unordered). Refuses with SQLSTATE
-- 22023 and a message naming the argument and its value.
CREATE FUNCTION /*schema*/api_event_order(a_event_id uuid, a_handler text, a_envelope jsonb,
                                          OUT aggregate_type text, OUT aggregate_id uuid,
                                          OUT aggregate_seq bigint)
RETURNS record
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    seq_text text;
BEGIN
    PERFORM /*schema*/api_check(a_event_id, a_handler);
    IF a_envelope IS NULL THEN
        IF /*schema*/ordering_on() THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('envelope is required for event %s: ordering is on, and the '
                                 'event''s aggregate_seq is read from its envelope', a_event_id),
                HINT = 'Pass the message body (the event''s envelope) as the last argument.';
        END IF;
        RETURN;
    END IF;
    IF jsonb_typeof(a_envelope) IS DISTINCT FROM 'object'
       OR a_envelope ->> 'id' IS DISTINCT FROM a_event_id::text THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('envelope.id %s is not event_id %s',
                             coalesce(quote_literal(a_envelope ->> 'id'), 'NULL'), a_event_id);
    END IF;
    seq_text := a_envelope ->> 'aggregate_seq';
    IF seq_text IS NULL THEN
        RETURN; -- unordered: written while ordering was off, or with no aggregate
    END IF;
    IF jsonb_typeof(a_envelope -> 'aggregate_seq') <> 'number' OR seq_text !~ '^[1-9][0-9]{0,17}$' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('envelope.aggregate_seq %s is not a whole number from 1', seq_text);
    END IF;
    IF coalesce(a_envelope ->> 'aggregate_type', '') = ''
       OR coalesce(a_envelope ->> 'aggregate_id', '')
          !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('envelope of event %s has aggregate_seq but aggregate_type %s and '
                             'aggregate_id %s do not name an aggregate', a_event_id,
                             coalesce(quote_literal(a_envelope ->> 'aggregate_type'), 'NULL'),
                             coalesce(quote_literal(a_envelope ->> 'aggregate_id'), 'NULL'));
    END IF;
    aggregate_type := a_envelope ->> 'aggregate_type';
    aggregate_id := (a_envelope ->> 'aggregate_id')::uuid;
    aggregate_seq := seq_text::bigint;
END
$fn$;

-- One event's claim for the API: 0005's ledger_claim, or 0017's
-- ledger_claim_ordered for an ordered event, waiting up to 10 s for a
-- claim row or progress row another open transaction holds. Raises what
-- is not now (busy 55P03; backoff, or an ordered event's predecessor not
-- done, 55000), with retry_after_ms in the DETAIL. Returns the claim's
-- state (run, done or dead) and, for run, the owner token.
CREATE FUNCTION /*schema*/api_claim(a_event_id uuid, a_handler text, a_lease_seconds integer,
                                    a_done boolean, a_envelope jsonb,
                                    OUT state text, OUT owner_token uuid)
RETURNS record
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    o record;
    c record;
BEGIN
    o := /*schema*/api_event_order(a_event_id, a_handler, a_envelope);
    IF a_lease_seconds IS NULL OR a_lease_seconds < 1 OR a_lease_seconds > 86400 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('lease_seconds %s is outside 1 to 86400',
                             coalesce(a_lease_seconds::text, 'NULL'));
    END IF;
    IF o.aggregate_seq IS NULL THEN
        SELECT * INTO c
          FROM /*schema*/ledger_claim(a_handler, ARRAY[a_event_id], a_lease_seconds, 10000, a_done);
    ELSE
        SELECT * INTO c
          FROM /*schema*/ledger_claim_ordered(a_handler, ARRAY[a_event_id], a_lease_seconds,
                                              10000, a_done, ARRAY[o.aggregate_type],
                                              ARRAY[o.aggregate_id], ARRAY[o.aggregate_seq],
                                              ARRAY[NULL::text], ARRAY[NULL::text],
                                              ARRAY[a_envelope::text]);
    END IF;
    CASE c.state
        WHEN 'busy' THEN
            RAISE EXCEPTION USING ERRCODE = '55P03',
                MESSAGE = format('event %s is being handled by another claim of handler %s',
                                 a_event_id, a_handler),
                DETAIL = format('retry_after_ms=%s', c.defer_ms),
                HINT = 'Roll back and have it delivered again later (nak with that delay).';
        WHEN 'backoff' THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('event %s backs off after %s failures of handler %s',
                                 a_event_id, c.attempts, a_handler),
                DETAIL = format('retry_after_ms=%s', c.defer_ms),
                HINT = 'Roll back and have it delivered again later (nak with that delay).';
        WHEN 'parked' THEN
            -- Raising undoes the parked copy too: the caller's feed keeps the event.
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('event %s (%s %s number %s) waits for number %s to be done by '
                                 'handler %s', a_event_id, o.aggregate_type, o.aggregate_id,
                                 o.aggregate_seq, o.aggregate_seq - 1, a_handler),
                DETAIL = 'retry_after_ms=1000',
                HINT = 'Roll back and have it delivered again later (nak with that delay).';
        ELSE
            NULL;
    END CASE;
    state := c.state;
    owner_token := c.owner_token;
    IF c.state = 'run' AND NOT a_done AND o.aggregate_seq IS NOT NULL THEN
        INSERT INTO /*schema*/claim_orders AS k (event_id, handler, aggregate_type, aggregate_id,
                                                 aggregate_seq)
        VALUES (a_event_id, a_handler, o.aggregate_type, o.aggregate_id, o.aggregate_seq)
            ON CONFLICT (event_id, handler) DO NOTHING;
    END IF;
END
$fn$;

-- Claims `event_id` for `handler` inside the caller's open transaction,
-- for effects in the same database. True: run the effects now, in this
-- transaction; the claim is written done and commits with them, or is
-- gone with them at rollback (so they happen once). False: done already,
-- or dead-lettered (outboxctl dead requeue runs it again). A claim another
-- open transaction holds is waited for (at most 10 s). Raises 55P03 or
-- 55000 when the event must be delivered again later; see the top of 0018.
-- `envelope`: the event's envelope (the message body); required on an
-- ordered schema.
CREATE FUNCTION /*schema*/try_claim(event_id uuid, handler text, envelope jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT c.state = 'run'
      FROM /*schema*/api_claim(event_id, handler, 60, true, envelope) AS c
$fn$;

-- Claims `event_id` for `handler` for `lease_seconds`, for effects outside
-- the database: returns the owner token that renew(), complete() and
-- fail() need, or NULL when the event is done or dead-lettered (ack it).
-- Commits with the caller's transaction (call it on its own). If the
-- claimer dies, the claim is taken over once the lease runs out, and the
-- old token is refused from then on. Raises 55P03 or 55000 when the
-- event must be delivered again later; see the top of 0018.
CREATE FUNCTION /*schema*/claim(event_id uuid, handler text, lease_seconds integer,
                                envelope jsonb DEFAULT NULL)
RETURNS uuid
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT c.owner_token
      FROM /*schema*/api_claim(event_id, handler, lease_seconds, false, envelope) AS c
$fn$;

-- Keeps a claim made by claim() alive for `lease_seconds` more while its
-- effect runs. False: the claim is no longer this token's (its lease ran
-- out and another claimer took it, or it was settled): stop.
CREATE FUNCTION /*schema*/renew(event_id uuid, handler text, token uuid, lease_seconds integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
    IF lease_seconds IS NULL OR lease_seconds < 1 OR lease_seconds > 86400 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('lease_seconds %s is outside 1 to 86400',
                             coalesce(lease_seconds::text, 'NULL'));
    END IF;
    UPDATE /*schema*/processed_events AS p
       SET claimed_until = now() + make_interval(secs => renew.lease_seconds)
     WHERE p.event_id = renew.event_id AND p.handler = renew.handler
       AND p.owner_token = renew.token AND p.status = 'in_progress' AND p.dead_at IS NULL;
    RETURN FOUND;
END
$fn$;

-- Marks a claim made by claim() done. True: done by this call. False: the
-- claim is no longer this token's (taken over after its lease ran out, or
-- settled already), and nothing changed. An ordered event moves its
-- aggregate on for the handler, so its successor may run.
CREATE FUNCTION /*schema*/complete(event_id uuid, handler text, token uuid)
RETURNS boolean
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
    WITH done AS (
        UPDATE /*schema*/processed_events AS p
           SET status = 'done', finished_at = now(), owner_token = NULL, claimed_until = NULL
         WHERE p.event_id = complete.event_id AND p.handler = complete.handler
           AND p.owner_token = complete.token AND p.status = 'in_progress'
        RETURNING p.event_id
    ), ordered AS (
        DELETE FROM /*schema*/claim_orders AS k
         WHERE k.event_id = complete.event_id AND k.handler = complete.handler
           AND EXISTS (SELECT FROM done)
        RETURNING k.aggregate_type, k.aggregate_id, k.aggregate_seq
    ), moved AS (
        UPDATE /*schema*/handler_progress AS g
           SET last_seq = o.aggregate_seq, updated_at = now()
          FROM ordered AS o
         WHERE g.handler = complete.handler AND g.aggregate_type = o.aggregate_type
           AND g.aggregate_id = o.aggregate_id AND g.last_seq < o.aggregate_seq
    )
    SELECT EXISTS (SELECT FROM done)
$fn$;

-- One handler failure in the ledger (the daemon's ledger_record_failure.sql
-- and fail() above): the claim row owned by `f_token`, in progress, gets
-- attempts + 1 and its next try after the backoff, or is dead-lettered at
-- f_max attempts; with no row at all (the claim was rolled back with the
-- handler's effects) one is made with attempts 1. f_token NULL stands for
-- such a rolled-back claim: it also counts on a row no one owns that is in
-- progress and not dead (the failures before it). Any other row (done,
-- dead, someone else's) is left alone and nothing comes back, so a failure
-- never counts twice and never touches a done row. The dead letter keeps
-- f_envelope (NULL if it is not JSON jsonb accepts).
CREATE FUNCTION /*schema*/ledger_fail(f_event_id uuid, f_handler text, f_token uuid,
                                      f_reason text, f_envelope text, f_max integer,
                                      f_base_ms integer, f_cap_ms integer)
RETURNS TABLE (attempts integer, next_attempt_at timestamptz, dead_at timestamptz)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
    WITH failed AS (
        UPDATE /*schema*/processed_events AS p
           SET attempts = p.attempts + 1,
               last_error = f_reason,
               owner_token = NULL,
               claimed_until = NULL,
               next_attempt_at =
                   CASE WHEN p.attempts + 1 >= f_max THEN NULL
                        ELSE now() + interval '1 millisecond'
                                     * /*schema*/backoff_ms(p.attempts + 1, f_base_ms, f_cap_ms,
                                                            random())
                   END,
               dead_at = CASE WHEN p.attempts + 1 >= f_max THEN now() END
         WHERE p.event_id = f_event_id AND p.handler = f_handler AND p.status = 'in_progress'
           AND (p.owner_token = f_token
                OR (f_token IS NULL AND p.owner_token IS NULL AND p.dead_at IS NULL))
        RETURNING p.event_id, p.attempts, p.next_attempt_at, p.dead_at
    ), recreated AS (
        INSERT INTO /*schema*/processed_events AS p (event_id, handler, attempts, last_error,
                                                     next_attempt_at, dead_at)
        SELECT f_event_id, f_handler, 1, f_reason,
               CASE WHEN 1 >= f_max THEN NULL
                    ELSE now() + interval '1 millisecond'
                                 * /*schema*/backoff_ms(1, f_base_ms, f_cap_ms, random())
               END,
               CASE WHEN 1 >= f_max THEN now() END
         WHERE NOT EXISTS (SELECT 1
                             FROM /*schema*/processed_events AS q
                            WHERE q.event_id = f_event_id AND q.handler = f_handler)
            ON CONFLICT (event_id, handler) DO NOTHING
        RETURNING p.event_id, p.attempts, p.next_attempt_at, p.dead_at
    ), outcome AS (
        SELECT * FROM failed
        UNION ALL
        SELECT * FROM recreated
    ), letter AS (
        INSERT INTO /*schema*/dead_letters AS d (event_id, handler, envelope, reason, attempts)
        SELECT o.event_id, f_handler, /*schema*/jsonb_or_null(f_envelope), f_reason, o.attempts
          FROM outcome AS o
         WHERE o.dead_at IS NOT NULL
            ON CONFLICT (event_id, handler) DO UPDATE
           SET envelope = excluded.envelope, reason = excluded.reason,
               attempts = excluded.attempts, dead_at = now(), requeued_at = NULL
    )
    SELECT o.attempts, o.next_attempt_at, o.dead_at FROM outcome AS o
$fn$;

-- Counts one failure of `handler` on `event_id` and says what comes next:
-- outcome 'retry' (due again at retry_at: until then claims raise 55000),
-- 'dead' (dead-lettered with `reason` and `envelope`; never claimed again
-- until outboxctl dead requeue) or 'stale' (the claim is no longer this
-- token's: nothing counted). `token` NULL counts the failure of a
-- try_claim() whose transaction rolled back (the claim went with it).
-- max_attempts and the backoff are the daemon's settings'
-- (OUTBOX_MAX_ATTEMPTS, OUTBOX_BACKOFF_BASE_MS, OUTBOX_BACKOFF_CAP_MS),
-- with the same defaults; the same backoff with the same jitter.
CREATE FUNCTION /*schema*/fail(event_id uuid, handler text, token uuid, reason text,
                               envelope jsonb DEFAULT NULL, max_attempts integer DEFAULT 10,
                               backoff_base_ms integer DEFAULT 5000,
                               backoff_cap_ms integer DEFAULT 300000,
                               OUT outcome text, OUT attempts integer, OUT retry_at timestamptz)
RETURNS record
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
    a_event_id uuid := fail.event_id;
    a_handler text := fail.handler;
    row_attempts integer;
    row_next timestamptz;
    row_dead timestamptz;
BEGIN
    PERFORM /*schema*/api_check(a_event_id, a_handler);
    IF coalesce(fail.reason, '') = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'reason is required';
    END IF;
    IF fail.max_attempts IS NULL OR fail.max_attempts < 1 OR fail.max_attempts > 1000 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('max_attempts %s is outside 1 to 1000',
                             coalesce(fail.max_attempts::text, 'NULL'));
    END IF;
    IF fail.backoff_base_ms IS NULL OR fail.backoff_base_ms < 1
       OR fail.backoff_cap_ms IS NULL OR fail.backoff_cap_ms < fail.backoff_base_ms THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('backoff_base_ms %s and backoff_cap_ms %s: the base must be at '
                             'least 1 and the cap at least the base',
                             coalesce(fail.backoff_base_ms::text, 'NULL'),
                             coalesce(fail.backoff_cap_ms::text, 'NULL'));
    END IF;
    SELECT r.attempts, r.next_attempt_at, r.dead_at INTO row_attempts, row_next, row_dead
      FROM /*schema*/ledger_fail(a_event_id, a_handler, fail.token, fail.reason, fail.envelope::text,
                                 fail.max_attempts, fail.backoff_base_ms,
                                 fail.backoff_cap_ms) AS r;
    IF NOT FOUND THEN
        outcome := 'stale';
        RETURN;
    END IF;
    DELETE FROM /*schema*/claim_orders AS k
     WHERE k.event_id = a_event_id AND k.handler = a_handler;
    outcome := CASE WHEN row_dead IS NOT NULL THEN 'dead' ELSE 'retry' END;
    attempts := row_attempts;
    retry_at := row_next;
END
$fn$;

-- Consumers of a database whose roles were made before this migration;
-- roles.sql grants them from now on.
DO $grant$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'outbox_consumer') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON /*schema*/claim_orders TO outbox_consumer;
    END IF;
END
$grant$;
