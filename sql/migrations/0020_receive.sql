-- 0020_receive: receive(), the pull half of the ledger's SQL API (0018), for
-- a service with no NATS client over the DB-only backend: it leases outbox
-- rows with the relay's own statements, claims each in the ledger for the
-- handler (0018's claim), and hands out the events it claimed with their
-- owner tokens. complete(), fail() and renew() settle them as before.
--
-- The relay's statements, as functions: each body below is a marker that
-- the build replaces with the text of sql/queries/NAME.sql
-- (cmake/EmbedSql.cmake), so receive() leases and finishes rows by the
-- very statements the relay and the DB feed prepare, not by a copy. A
-- database keeps the text of the build that migrated it: a migration that
-- changes one of those statements re-creates its function here (CREATE OR
-- REPLACE with the same marker).

-- claim_cursor.sql: locks the schema's claim cursor (claims queue here).
CREATE FUNCTION /*schema*/relay_claim_cursor() RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
/*query:claim_cursor*/
$fn$;

-- claim_takeover.sql: gives back the rows of window claims that ran out.
CREATE FUNCTION /*schema*/relay_claim_takeover()
RETURNS TABLE (given_back bigint, retries_due boolean)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
/*query:claim_takeover*/
$fn$;

-- claim_window.sql: the next fresh rows, by commit window, under the cursor lock.
-- The statement's text as it was when this migration was written, not its
-- marker: migration 0032 made the statement return a count and read the
-- rows after its commit, which this function could not return, and
-- re-creates the function over the two statements.
CREATE FUNCTION /*schema*/relay_claim_window(integer, integer, text)
RETURNS TABLE (id uuid, envelope text, attempts integer, lease_token uuid, quarantined boolean,
               lease_expiries integer, taken_over boolean, event_type text,
               aggregate_type text, aggregate_id text, tenant_id text, data_subject text,
               aggregate_seq bigint)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
-- claim_window: claim the next fresh rows, by commit window, with no write
-- to them. Runs under the cursor lock (claim_cursor.sql).
-- $1: batch limit; $2: claim seconds; $3: holder (application_name).
-- First the rest of the current window (s_lo, s_hi]: rows visible in s_hi
-- and not in s_lo, after pos in (tx, id) order (a transaction s_lo saw
-- running has a tx below s_lo's xmax, so those come first). When fewer
-- than $1 are left, the window is done: the next one is (s_hi, this statement's
-- snapshot], and its first rows fill the batch. The cursor then records
-- where the batch stopped, and a relay_claims row the rows taken, under a
-- fresh token (the lease token the finish and the extension guard with).
-- Returns the rows in lease_batch.sql's columns (none quarantined or taken
-- over here: claim_takeover.sql counts those).
WITH cur AS MATERIALIZED (
    SELECT s_lo, s_hi, pos_tx, pos_id, pg_current_snapshot() AS s_now,
           ARRAY(SELECT pg_snapshot_xip(s_lo)) AS lo_xip,
           ARRAY(SELECT pg_snapshot_xip(s_hi)) AS hi_xip,
           -- Where the window's second part starts: past s_lo's xmax, or at
           -- pos once the claims are in it.
           CASE WHEN s_lo IS NULL OR pos_tx >= pg_snapshot_xmax(s_lo) THEN pos_tx
                ELSE (pg_snapshot_xmax(s_lo)::text::bigint - 1)::text::xid8 END AS from_tx,
           CASE WHEN s_lo IS NULL OR pos_tx >= pg_snapshot_xmax(s_lo) THEN pos_id
                ELSE 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid END AS from_id
      FROM /*schema*/relay_cursor
), rest AS MATERIALIZED (
    -- The window (s_lo, s_hi] in two parts, each an ordered index scan that
    -- stops at the limit: the transactions s_lo saw running (its xip list,
    -- looked up by tx), then those that began after it (tx >= its xmax).
    -- No part reads a row an earlier window took, however far back a long
    -- transaction holds s_lo's xmin.
    SELECT * FROM (
        (SELECT e.id, e.tx, e.envelope, e.attempts, e.lease_expiries, e.event_type,
                   e.aggregate_type, e.aggregate_id, e.tenant_id, e.data_subject, e.aggregate_seq
           FROM /*schema*/events AS e
          WHERE e.published_at IS NULL AND e.next_attempt_at <= e.created_at AND e.status = 'pending'
            AND e.tx = ANY ((SELECT lo_xip FROM cur)::xid8[])
            AND (e.tx, e.id) > ((SELECT pos_tx FROM cur), (SELECT pos_id FROM cur))
            AND pg_visible_in_snapshot(e.tx, (SELECT s_hi FROM cur))
          ORDER BY e.tx, e.id
          LIMIT $1)
        UNION ALL
        (SELECT e.id, e.tx, e.envelope, e.attempts, e.lease_expiries, e.event_type,
                   e.aggregate_type, e.aggregate_id, e.tenant_id, e.data_subject, e.aggregate_seq
           FROM /*schema*/events AS e
          WHERE e.published_at IS NULL AND e.next_attempt_at <= e.created_at AND e.status = 'pending'
            AND (e.tx, e.id) > ((SELECT from_tx FROM cur), (SELECT from_id FROM cur))
            AND e.tx < pg_snapshot_xmax((SELECT s_hi FROM cur))
            AND pg_visible_in_snapshot(e.tx, (SELECT s_hi FROM cur))
          ORDER BY e.tx, e.id
          LIMIT $1)
    ) AS r
     ORDER BY r.tx, r.id
     LIMIT $1
), done_with_window AS MATERIALIZED (
    SELECT count(*) < $1 AS yes FROM rest
), next AS MATERIALIZED (
    -- The next window (s_hi, this statement's snapshot], in the same two
    -- parts; what this statement sees is in its snapshot.
    SELECT * FROM (
        (SELECT e.id, e.tx, e.envelope, e.attempts, e.lease_expiries, e.event_type,
                   e.aggregate_type, e.aggregate_id, e.tenant_id, e.data_subject, e.aggregate_seq
           FROM /*schema*/events AS e
          WHERE (SELECT yes FROM done_with_window) AND e.published_at IS NULL AND e.next_attempt_at <= e.created_at AND e.status = 'pending'
            AND e.tx = ANY ((SELECT hi_xip FROM cur)::xid8[])
          ORDER BY e.tx, e.id
          LIMIT $1)
        UNION ALL
        (SELECT e.id, e.tx, e.envelope, e.attempts, e.lease_expiries, e.event_type,
                   e.aggregate_type, e.aggregate_id, e.tenant_id, e.data_subject, e.aggregate_seq
           FROM /*schema*/events AS e
          WHERE (SELECT yes FROM done_with_window) AND e.published_at IS NULL AND e.next_attempt_at <= e.created_at AND e.status = 'pending'
            AND e.tx >= pg_snapshot_xmax((SELECT s_hi FROM cur))
          ORDER BY e.tx, e.id
          LIMIT $1)
    ) AS n
     ORDER BY n.tx, n.id
     LIMIT $1 - (SELECT count(*) FROM rest)
), taken AS MATERIALIZED (
    SELECT 0 AS part, * FROM rest UNION ALL SELECT 1 AS part, * FROM next
), runs AS MATERIALIZED (
    -- An ordered schema's rows (a number given, migration 0014) go out only
    -- from their aggregate's head: the batch's rows of one aggregate, in
    -- aggregate_seq order, as far as they follow on from the lowest one
    -- without a gap, and only if that one's predecessor is published (or
    -- skipped, or not in the table: published and pruned). Windows take rows
    -- in (tx, id) order, which is not commit order within a window, and a
    -- batch can stop between two numbers of one aggregate: the rest wait.
    -- Each row whole, so that `out` takes them from here, not by a join
    -- back to taken (a join of two CTEs is planned from their guessed
    -- sizes: a nested loop, quadratic in the batch).
    SELECT t.*, t.aggregate_seq - first_value(t.aggregate_seq) OVER w + 1
                = row_number() OVER w AS in_run,
           first_value(t.aggregate_seq) OVER w AS first_seq,
           min(t.tx) OVER (PARTITION BY t.part, t.aggregate_type, t.aggregate_id) AS run_tx
      FROM taken AS t
     WHERE t.aggregate_seq IS NOT NULL
    WINDOW w AS (PARTITION BY t.aggregate_type, t.aggregate_id ORDER BY t.aggregate_seq)
), waiting AS MATERIALIZED (
    SELECT r.id
      FROM runs AS r
     WHERE NOT r.in_run
        -- head_waits() of migration 0016, written out: a function with a
        -- subquery is not inlined, and a call per aggregate costs ~50 us.
        OR r.first_seq > 1 AND EXISTS (
               SELECT 1
                 FROM /*schema*/events AS p
                WHERE p.aggregate_type = r.aggregate_type AND p.aggregate_id = r.aggregate_id
                  AND p.aggregate_seq = r.first_seq - 1 AND p.published_at IS NULL
                  AND NOT EXISTS (SELECT 1
                                    FROM /*schema*/aggregate_skips AS k
                                   WHERE k.aggregate_type = r.aggregate_type
                                     AND k.aggregate_id = r.aggregate_id
                                     AND k.aggregate_seq = r.first_seq - 1 AND k.handler = ''))
), parked AS (
    -- Waiting rows leave the windows for the row lease (next_attempt_at
    -- after created_at), marked as waiting for their head: a publish of an
    -- earlier number of the aggregate wakes them (wake_successors.sql), and
    -- the row lease looks again after a while in any case
    -- (head_wait_until()), so a wake-up lost in a race costs a delay, not the
    -- aggregate. No attempt is spent.
    UPDATE /*schema*/events AS e
       SET next_attempt_at = /*schema*/head_wait_until(e.created_at)
                             -- due in number order, so that the row lease takes a run whole
                             + interval '1 microsecond' * (e.aggregate_seq % 1000000),
           last_error = 'waiting_for_head'
     WHERE e.id = ANY (ARRAY(SELECT id FROM waiting)) -- by primary key, none when none wait
), out AS MATERIALIZED (
    -- The unordered rows, then the ordered ones that do not wait.
    SELECT t.*, t.tx AS run_tx
      FROM taken AS t
     WHERE t.aggregate_seq IS NULL
    UNION ALL
    SELECT r.part, r.id, r.tx, r.envelope, r.attempts, r.lease_expiries, r.event_type,
           r.aggregate_type, r.aggregate_id, r.tenant_id, r.data_subject, r.aggregate_seq, r.run_tx
      FROM runs AS r
     WHERE r.id NOT IN (SELECT id FROM waiting)
), last AS MATERIALIZED (
    -- Where the batch stopped: in the window just begun when the old one
    -- was done, else in the old one.
    SELECT tx, id FROM taken WHERE part = (SELECT yes FROM done_with_window)::integer
     ORDER BY tx DESC, id DESC LIMIT 1
), moved AS (
    -- A window just begun with nothing taken from it yet starts before its
    -- first row: (xmin - 1, the greatest uuid) sorts before every tx >= xmin.
    UPDATE /*schema*/relay_cursor AS c
       SET s_lo = CASE WHEN w.yes THEN cur.s_hi ELSE c.s_lo END,
           s_hi = CASE WHEN w.yes THEN cur.s_now ELSE c.s_hi END,
           pos_tx = coalesce((SELECT tx FROM last),
                             (pg_snapshot_xmin(cur.s_hi)::text::bigint - 1)::text::xid8),
           pos_id = coalesce((SELECT id FROM last), 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid)
      FROM cur, done_with_window AS w
), floor AS (
    -- Every few seconds, where a relay that lost the cursor must start: no
    -- row the windows have not published is below the window's xmin or the
    -- lowest tx of an open claim's rows. A first window (no s_lo) starts at
    -- the floor and leaves it.
    UPDATE /*schema*/relay_floor AS f
       SET tx = least(pg_snapshot_xmin(cur.s_lo),
                      (SELECT min(min_tx) FROM /*schema*/relay_claims)),
           written_at = now()
      FROM cur
     WHERE f.written_at < now() - interval '2 seconds' AND cur.s_lo IS NOT NULL
), claim AS (
    INSERT INTO /*schema*/relay_claims (token, holder, ids, expires_at, min_tx)
    SELECT gen_random_uuid(), $3, array_agg(id), now() + make_interval(secs => $2), min(tx)
      FROM out
    HAVING count(*) > 0
    RETURNING token
)
-- An aggregate's run goes out in number order, where its first row would be.
SELECT t.id, t.envelope::text AS envelope, t.attempts, (SELECT token FROM claim) AS lease_token,
       false AS quarantined, t.lease_expiries, false AS taken_over, t.event_type,
       t.aggregate_type, t.aggregate_id::text AS aggregate_id, t.tenant_id, t.data_subject,
       t.aggregate_seq
  FROM out AS t
 ORDER BY t.part, t.run_tx, t.aggregate_type, t.aggregate_id, t.aggregate_seq, t.tx, t.id
$fn$;

-- lease_batch.sql: the row lease of the rows that came back (retries, releases, requeues).
CREATE FUNCTION /*schema*/relay_lease_rows(integer, integer, integer)
RETURNS TABLE (id uuid, envelope text, attempts integer, lease_token uuid, quarantined boolean,
               lease_expiries integer, taken_over boolean, event_type text,
               aggregate_type text, aggregate_id text, tenant_id text, data_subject text,
               aggregate_seq bigint)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
/*query:lease_batch*/
$fn$;

-- finish_rows.sql: one outcome per leased row.
CREATE FUNCTION /*schema*/relay_finish_rows(uuid, uuid[], text[], text[], boolean, integer,
                                            integer, integer, integer, bigint[], bigint[])
RETURNS TABLE (done bigint, retried bigint, dead bigint, released bigint, invalid bigint)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
/*query:finish_rows*/
$fn$;

-- wake_successors.sql: an ordered aggregate's next numbers, now that these are out: the run
-- behind each leased to the caller, the rest due. The statement's text as it
-- was when this migration was written, not its marker: migration 0022 gave
-- the statement a seventh parameter, which this six-parameter function could
-- not take, and re-creates the function with the marker.
CREATE FUNCTION /*schema*/relay_wake_successors(text[], uuid[], bigint[], bigint, integer,
                                                integer)
RETURNS TABLE (id uuid, envelope text, attempts integer, lease_token uuid, quarantined boolean,
               lease_expiries integer, taken_over boolean, event_type text,
               aggregate_type text, aggregate_id text, tenant_id text, data_subject text,
               aggregate_seq bigint, leased boolean)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
-- wake_successors: after a batch's publish, lease the rows that waited for
-- these heads to the relay that published them (migration 0016).
-- $1: aggregate types (text[]); $2: aggregate ids (uuid[]); $3: the numbers
-- just published (bigint[]), one element per published ordered row; $4: how
-- many numbers after the last published to wake (the relay's batch); $5:
-- lease seconds; $6: max lease expiries (>= 1).
-- Of the next $4 numbers of each aggregate that wait for their head, the
-- run that follows the published number without a gap is leased at once,
-- under one fresh token, and returned in lease_batch.sql's columns: the
-- relay publishes it as its next batch, with one write per row (leased)
-- where making it due and then leasing it took two. The run's first row's
-- predecessor is the number this relay has just published, so the run is
-- its aggregate's head (checked: the finish recorded it). Rows after a gap (a number not waiting, or locked
-- by another relay), and a row whose window claims ran out $6 times (the
-- row lease turns it dead), are made due now instead, for the row lease,
-- which checks their head again. Waking more than a batch would only make
-- the row lease look at them too early. A row backing off after a failed
-- publish is not waiting for its head, and keeps its time.
WITH published AS MATERIALIZED (
    SELECT aggregate_type, aggregate_id, max(aggregate_seq) AS aggregate_seq
      FROM unnest($1::text[], $2::uuid[], $3::bigint[])
           AS d(aggregate_type, aggregate_id, aggregate_seq)
     -- Nothing waits, the usual case: one read of the empty index, no lookups.
     WHERE EXISTS (SELECT 1 FROM /*schema*/events AS x WHERE x.last_error = 'waiting_for_head')
     GROUP BY 1, 2
), waiting AS MATERIALIZED (
    SELECT w.id, w.aggregate_type, w.aggregate_id, w.aggregate_seq,
           w.aggregate_seq - d.aggregate_seq AS step, w.lease_expiries >= $6::integer AS spent
      FROM published AS d
      JOIN /*schema*/events AS w
        ON w.aggregate_type = d.aggregate_type AND w.aggregate_id = d.aggregate_id
       AND w.aggregate_seq > d.aggregate_seq AND w.aggregate_seq <= d.aggregate_seq + $4::bigint
     -- Due already too (its wait ran out first): the row lease may be
     -- taking it right now, so it is skipped if locked.
     WHERE w.status = 'pending' AND w.last_error = 'waiting_for_head'
       FOR UPDATE OF w SKIP LOCKED
), recorded AS MATERIALIZED (
    -- The aggregates with rows waiting whose published number the finish
    -- recorded: one that lost its lease recorded nothing (another relay
    -- holds that row now), so the rows behind it are only made due.
    SELECT d.aggregate_type, d.aggregate_id
      FROM published AS d
     WHERE (d.aggregate_type, d.aggregate_id) IN (SELECT aggregate_type, aggregate_id FROM waiting)
       AND NOT EXISTS (SELECT 1
                         FROM /*schema*/events AS p
                        WHERE p.aggregate_type = d.aggregate_type
                          AND p.aggregate_id = d.aggregate_id
                          AND p.aggregate_seq = d.aggregate_seq AND p.published_at IS NULL)
), runs AS MATERIALIZED (
    -- In the run: every number from the published one's next up to it is
    -- here, none of them is spent, and the published one is recorded.
    SELECT id, aggregate_type, aggregate_id, aggregate_seq, step,
           step = row_number() OVER w AND NOT bool_or(spent) OVER w
           AND (aggregate_type, aggregate_id) IN (SELECT aggregate_type, aggregate_id
                                                    FROM recorded) AS in_run
      FROM waiting
    WINDOW w AS (PARTITION BY aggregate_type, aggregate_id ORDER BY aggregate_seq)
), capped AS MATERIALIZED (
    -- At most a batch leased in all (a run's prefix is still in order).
    SELECT id, step,
           in_run AND sum(in_run::integer) OVER (ORDER BY aggregate_type, aggregate_id,
                                                 aggregate_seq) <= $4::bigint AS in_run
      FROM runs
), batch AS MATERIALIZED (
    SELECT gen_random_uuid() AS token
), woken AS (
    -- Due now, in number order (a microsecond apart), so that the row
    -- lease, which takes the earliest due first, takes an aggregate's run
    -- from its lowest number; after created_at, so the row stays in the
    -- retries' index. A leased row is due too: if its lease runs out, the
    -- row lease takes it back at once.
    UPDATE /*schema*/events AS e
       SET next_attempt_at = greatest(e.created_at, now() - interval '1 second')
                             + interval '1 microsecond' * r.step,
           status = CASE WHEN r.in_run THEN 'leased' ELSE e.status END,
           leased_until = CASE WHEN r.in_run THEN now() + make_interval(secs => $5::integer) END,
           lease_token = CASE WHEN r.in_run THEN b.token END,
           last_error = CASE WHEN r.in_run THEN NULL ELSE e.last_error END
      FROM capped AS r, batch AS b
     WHERE e.id = r.id
    RETURNING e.id, e.status, e.envelope, e.attempts, e.lease_token, e.lease_expiries,
              e.event_type, e.aggregate_type, e.aggregate_id, e.tenant_id, e.data_subject,
              e.aggregate_seq
)
SELECT id, envelope::text AS envelope, attempts, lease_token, false AS quarantined,
       lease_expiries, false AS taken_over, event_type, aggregate_type,
       aggregate_id::text AS aggregate_id, tenant_id, data_subject, aggregate_seq,
       status = 'leased' AS leased
  FROM woken
 ORDER BY status <> 'leased', aggregate_type, aggregate_id, aggregate_seq

$fn$;

REVOKE ALL ON FUNCTION /*schema*/relay_claim_cursor(), /*schema*/relay_claim_takeover(),
    /*schema*/relay_claim_window(integer, integer, text),
    /*schema*/relay_lease_rows(integer, integer, integer),
    /*schema*/relay_finish_rows(uuid, uuid[], text[], text[], boolean, integer, integer,
                                integer, integer, bigint[], bigint[]),
    /*schema*/relay_wake_successors(text[], uuid[], bigint[], bigint, integer, integer)
    FROM PUBLIC;

-- One lease for receive(), by the relay's statements: fresh rows by window
-- (claim_window.sql, under the cursor lock receive() took), or with
-- `came_back` the rows that came back (lease_batch.sql; the rows it
-- quarantines are dead already, with the relay's dead letter). Returns the
-- lease token (NULL: nothing leased) and the rows, in the lease's order.
CREATE FUNCTION /*schema*/receive_lease(came_back boolean, lease_limit integer,
                                        OUT lease_token uuid, OUT ids uuid[],
                                        OUT envelopes text[], OUT aggregate_types text[],
                                        OUT aggregate_ids uuid[], OUT aggregate_seqs bigint[])
RETURNS record
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF came_back THEN
        SELECT min(w.lease_token::text)::uuid, array_agg(w.id ORDER BY w.n),
               array_agg(w.envelope ORDER BY w.n), array_agg(w.aggregate_type ORDER BY w.n),
               array_agg(w.aggregate_id::uuid ORDER BY w.n),
               array_agg(w.aggregate_seq ORDER BY w.n)
          INTO lease_token, ids, envelopes, aggregate_types, aggregate_ids, aggregate_seqs
          FROM /*schema*/relay_lease_rows(lease_limit, 60, 5)
               WITH ORDINALITY AS w(id, envelope, attempts, lease_token, quarantined,
                                    lease_expiries, taken_over, event_type, aggregate_type,
                                    aggregate_id, tenant_id, data_subject, aggregate_seq, n)
         WHERE NOT w.quarantined;
    ELSE
        SELECT min(w.lease_token::text)::uuid, array_agg(w.id ORDER BY w.n),
               array_agg(w.envelope ORDER BY w.n), array_agg(w.aggregate_type ORDER BY w.n),
               array_agg(w.aggregate_id::uuid ORDER BY w.n),
               array_agg(w.aggregate_seq ORDER BY w.n)
          INTO lease_token, ids, envelopes, aggregate_types, aggregate_ids, aggregate_seqs
          FROM /*schema*/relay_claim_window(lease_limit, 60, 'receive')
               WITH ORDINALITY AS w(id, envelope, attempts, lease_token, quarantined,
                                    lease_expiries, taken_over, event_type, aggregate_type,
                                    aggregate_id, tenant_id, data_subject, aggregate_seq, n);
    END IF;
END
$fn$;

-- A leased row's outcome for finish_rows.sql once the calling handler's
-- claim is known (o_owner_token: claimed now; o_wait_ms: when the ledger
-- says to come back, for a live claim or a backoff): 'done' when every
-- handler of the group (o_group) is done with the event or dead-lettered
-- it, as the DB feed acks a message every handler is done with; else
-- 'release' after delay_ms.
CREATE FUNCTION /*schema*/receive_outcome(o_event_id uuid, o_group text[], o_owner_token uuid,
                                          o_wait_ms bigint, OUT outcome text,
                                          OUT delay_ms bigint)
RETURNS record
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF o_owner_token IS NULL AND NOT EXISTS (
           SELECT 1
             FROM unnest(o_group) AS g(name)
            WHERE NOT EXISTS (SELECT 1
                                FROM /*schema*/processed_events AS p
                               WHERE p.event_id = o_event_id AND p.handler = g.name
                                 AND (p.status = 'done' OR p.dead_at IS NOT NULL))) THEN
        outcome := 'done';
        RETURN;
    END IF;
    outcome := 'release';
    -- Back in a second to be seen done (a claim completes any time), or when
    -- the ledger says (a backoff); with other handlers in the group, a
    -- second at most, so that they take it without waiting for this one.
    delay_ms := CASE WHEN o_owner_token IS NOT NULL OR o_wait_ms IS NULL THEN 1000
                     ELSE greatest(o_wait_ms, 100) END;
    IF cardinality(o_group) > 1 THEN
        delay_ms := least(delay_ms, 1000);
    END IF;
END
$fn$;

-- One leased row offered to `o_handler` for receive() on its own: claimed
-- through 0018's api_claim (owner_token set: hand it out), or not now (a
-- live claim, a backoff, an ordered predecessor not done: its
-- retry_after_ms), or done or dead already; then receive_outcome(), or
-- 'invalid' for an envelope the API refuses. For ordered events, whose
-- early claim api_claim undoes by raising, and bad envelopes.
CREATE FUNCTION /*schema*/receive_offer(o_handler text, o_event_id uuid, o_envelope text,
                                        o_lease_seconds integer, o_group text[],
                                        OUT outcome text, OUT reason text, OUT delay_ms bigint,
                                        OUT owner_token uuid, OUT attempts integer)
RETURNS record
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    env jsonb := o_envelope::jsonb; -- the row's envelope column is jsonb: it parses
    c record;
    wait_ms bigint;
    detail text;
    state text;
BEGIN
    BEGIN
        SELECT * INTO c
          FROM /*schema*/api_claim(o_event_id, o_handler, o_lease_seconds, false, env);
        IF c.state = 'run' THEN
            owner_token := c.owner_token;
            SELECT p.attempts INTO attempts
              FROM /*schema*/processed_events AS p
             WHERE p.event_id = o_event_id AND p.handler = o_handler;
        END IF;
    EXCEPTION
        WHEN lock_not_available OR object_not_in_prerequisite_state THEN
            GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, state = RETURNED_SQLSTATE;
            wait_ms := substring(detail FROM 'retry_after_ms=([0-9]+)')::bigint;
            IF state = '55P03' THEN
                wait_ms := least(wait_ms, 1000); -- a live claim may complete any time
            END IF;
        WHEN invalid_parameter_value THEN
            -- An envelope no handler could take (its id, its aggregate_seq):
            -- quarantined as the DB feed does one that fails its checks.
            GET STACKED DIAGNOSTICS reason = MESSAGE_TEXT;
            outcome := 'invalid';
            RETURN;
    END;
    SELECT r.outcome, r.delay_ms INTO outcome, delay_ms
      FROM /*schema*/receive_outcome(o_event_id, o_group, owner_token, wait_ms) AS r;
END
$fn$;

-- Receives up to `max` events for `handler`: each is claimed in the ledger
-- for `lease_seconds`, as claim() claims, and comes with its owner token
-- for renew(), complete() and fail() (the unordered events of one call
-- share one, as a daemon's batch does). Call it on its own (autocommit): the
-- claims commit with it. None: nothing is due for this handler now; call
-- again after a pause. The handlers that receive from a schema are one
-- consumer group, like the DB feed's: an outbox row is finished (deleted)
-- once every one of them is done with its event or dead-lettered it, and
-- until then comes back to be offered again. An event done or dead for
-- this handler, held by another live claim of it, backing off after a
-- failure, or (ordered) whose predecessor is not done for the handler, is
-- not handed out. Bad arguments raise 22023 naming them.
CREATE FUNCTION /*schema*/receive(handler text, max integer DEFAULT 10,
                                  lease_seconds integer DEFAULT 60)
RETURNS TABLE (event_id uuid, token uuid, envelope jsonb, attempts integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
    a_handler text := receive.handler;
    a_max integer := receive.max;
    a_lease integer := receive.lease_seconds;
    group_names text[];
    taken integer := 0;
    due boolean;
    l_token uuid;
    l_ids uuid[];
    l_envs text[];
    l_types text[];
    l_aggs uuid[];
    l_seqs bigint[];
    f_ids uuid[];
    f_outcomes text[];
    f_reasons text[];
    f_delays bigint[];
    w_types text[];
    w_aggs uuid[];
    w_seqs bigint[];
    wk_token uuid;
    wk_ids uuid[];
    b_ids uuid[];
    k_states text[];
    k_defer bigint[];
    k_tokens uuid[];
    k_attempts integer[];
    o record;
BEGIN
    PERFORM /*schema*/api_check('00000000-0000-0000-0000-000000000000', a_handler);
    IF a_max IS NULL OR a_max < 1 OR a_max > 1000 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('max %s is outside 1 to 1000', coalesce(a_max::text, 'NULL'));
    END IF;
    IF a_lease IS NULL OR a_lease < 1 OR a_lease > 86400 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('lease_seconds %s is outside 1 to 86400',
                             coalesce(a_lease::text, 'NULL'));
    END IF;
    -- The window claim takes its snapshots once the cursor lock is held; a
    -- snapshot taken for the whole transaction would claim a stale window.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING ERRCODE = '25001',
            MESSAGE = format('receive() runs in read committed, not %s',
                             current_setting('transaction_isolation')),
            HINT = 'Call it on its own, in autocommit.';
    END IF;

    INSERT INTO /*schema*/handlers AS h (name, subject_filter, consumer_group, backend, replica)
    VALUES (a_handler, '>', 'receive', 'db',
            left(coalesce(nullif(current_setting('application_name'), ''), session_user::text),
                 64))
        ON CONFLICT (backend, consumer_group, name) DO UPDATE
       SET last_seen = now(), replica = excluded.replica
     WHERE h.last_seen < now() - interval '10 seconds';
    group_names := ARRAY(SELECT h.name
                           FROM /*schema*/handlers AS h
                          WHERE h.backend = 'db' AND h.consumer_group = 'receive'
                          ORDER BY h.name);

    -- A few leases at most: a lease of events not to hand out (done, held,
    -- waiting) is settled, and the next may hold some. Rows released in this
    -- transaction are due after its now(), so no lease takes one twice.
    FOR pass IN 1..3 LOOP
        EXIT WHEN taken >= a_max;
        PERFORM /*schema*/relay_claim_cursor();
        SELECT t.retries_due INTO due FROM /*schema*/relay_claim_takeover() AS t;
        -- Fresh rows and those that came back take turns leading, as the
        -- relay's leases take turns: neither waits behind the other for long.
        l_token := NULL;
        IF due AND pass % 2 = 0 THEN
            SELECT * INTO l_token, l_ids, l_envs, l_types, l_aggs, l_seqs
              FROM /*schema*/receive_lease(true, a_max - taken);
        END IF;
        IF l_token IS NULL THEN
            SELECT * INTO l_token, l_ids, l_envs, l_types, l_aggs, l_seqs
              FROM /*schema*/receive_lease(false, a_max - taken);
        END IF;
        IF l_token IS NULL AND due AND pass % 2 = 1 THEN
            SELECT * INTO l_token, l_ids, l_envs, l_types, l_aggs, l_seqs
              FROM /*schema*/receive_lease(true, a_max - taken);
        END IF;
        EXIT WHEN l_token IS NULL;

        f_ids := '{}'; f_outcomes := '{}'; f_reasons := '{}'; f_delays := '{}';
        w_types := '{}'; w_aggs := '{}'; w_seqs := '{}';
        -- The unordered events with a sound envelope in one claim: 0005's
        -- ledger_claim, which api_claim calls for one, as the daemon claims a
        -- batch (one owner token for the batch). The others one by one.
        b_ids := ARRAY(SELECT u.id
                         FROM unnest(l_ids, l_envs) AS u(id, env)
                        WHERE u.env::jsonb ->> 'id' = u.id::text
                          AND NOT u.env::jsonb ? 'aggregate_seq');
        SELECT array_agg(c.state ORDER BY u.n), array_agg(c.defer_ms ORDER BY u.n),
               array_agg(c.owner_token ORDER BY u.n), array_agg(c.attempts ORDER BY u.n)
          INTO k_states, k_defer, k_tokens, k_attempts
          FROM unnest(l_ids) WITH ORDINALITY AS u(id, n)
          LEFT JOIN /*schema*/ledger_claim(a_handler, b_ids, a_lease, 10000, false) AS c
                 ON c.event_id = u.id;
        FOR i IN 1..cardinality(l_ids) LOOP
            IF k_states[i] IS NULL THEN
                SELECT * INTO o
                  FROM /*schema*/receive_offer(a_handler, l_ids[i], l_envs[i], a_lease,
                                               group_names);
            ELSE
                SELECT r.outcome, NULL::text AS reason, r.delay_ms,
                       CASE WHEN k_states[i] = 'run' THEN k_tokens[i] END AS owner_token,
                       k_attempts[i] AS attempts
                  INTO o
                  FROM /*schema*/receive_outcome(
                           l_ids[i], group_names,
                           CASE WHEN k_states[i] = 'run' THEN k_tokens[i] END,
                           CASE k_states[i] WHEN 'busy' THEN least(k_defer[i], 1000)
                                            WHEN 'backoff' THEN k_defer[i] END) AS r;
            END IF;
            f_ids := f_ids || l_ids[i];
            f_outcomes := f_outcomes || o.outcome;
            f_reasons := f_reasons || o.reason;
            f_delays := f_delays || o.delay_ms;
            IF o.outcome = 'done' AND l_seqs[i] IS NOT NULL THEN
                w_types := w_types || l_types[i];
                w_aggs := w_aggs || l_aggs[i];
                w_seqs := w_seqs || l_seqs[i];
            END IF;
            IF o.owner_token IS NOT NULL THEN
                taken := taken + 1;
                event_id := l_ids[i];
                token := o.owner_token;
                envelope := l_envs[i]::jsonb;
                attempts := o.attempts;
                RETURN NEXT;
            END IF;
        END LOOP;
        PERFORM /*schema*/relay_finish_rows(l_token, f_ids, f_outcomes, f_reasons, true, 1, 0, 1,
                                            1, f_delays, NULL::bigint[]);
        IF cardinality(w_seqs) > 0 THEN
            -- The run behind each head comes leased to this call (the relay
            -- publishes it next); receive() hands out only what it claimed in
            -- the ledger, so it gives the run back, due now, for the next call.
            SELECT min(w.lease_token::text)::uuid, array_agg(w.id)
              INTO wk_token, wk_ids
              FROM /*schema*/relay_wake_successors(w_types, w_aggs, w_seqs, 100, 60, 5) AS w
             WHERE w.leased;
            IF wk_token IS NOT NULL THEN
                PERFORM /*schema*/relay_finish_rows(
                            wk_token, wk_ids,
                            array_fill('release'::text, ARRAY[cardinality(wk_ids)]),
                            array_fill(NULL::text, ARRAY[cardinality(wk_ids)]), true, 1, 0, 1,
                            1, NULL::bigint[], NULL::bigint[]);
            END IF;
        END IF;
    END LOOP;
END
$fn$;

REVOKE ALL ON FUNCTION /*schema*/receive_offer(text, uuid, text, integer, text[]),
    /*schema*/receive_outcome(uuid, text[], uuid, bigint),
    /*schema*/receive_lease(boolean, integer) FROM PUBLIC;
-- A definer's function: only the roles granted it may call it.
REVOKE ALL ON FUNCTION /*schema*/receive(text, integer, integer) FROM PUBLIC;
DO $grant$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'outbox_consumer') THEN
        GRANT EXECUTE ON FUNCTION /*schema*/receive(text, integer, integer) TO outbox_consumer;
    END IF;
END
$grant$;
