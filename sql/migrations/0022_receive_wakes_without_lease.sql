-- 0022_receive_wakes_without_lease: receive() wakes the rows waiting behind
-- the heads it finished without leasing them. wake_successors.sql has a
-- seventh parameter, lease: the relay passes true (the run behind a head it
-- published is leased to it, its next batch, as in 0016); receive() passes
-- false, and the woken rows are only made due, free for the next lease.
-- receive() hands out only what it claimed in the ledger, so it used to give
-- back at once the run the wake-up had leased to it: two writes per row where
-- none was needed.
--
-- relay_wake_successors() takes the statement's new parameter (its body is
-- the statement, by the marker, as in 0020), and receive() calls it with
-- lease false instead of leasing and releasing.

DROP FUNCTION /*schema*/relay_wake_successors(text[], uuid[], bigint[], bigint, integer, integer);

-- wake_successors.sql: an ordered aggregate's next numbers, now that these are out: with
-- lease, the run behind each leased to the caller and the rest due; without, all due.
CREATE OR REPLACE FUNCTION /*schema*/relay_wake_successors(text[], uuid[], bigint[], bigint,
                                                           integer, integer, boolean)
RETURNS TABLE (id uuid, envelope text, attempts integer, lease_token uuid, quarantined boolean,
               lease_expiries integer, taken_over boolean, event_type text,
               aggregate_type text, aggregate_id text, tenant_id text, data_subject text,
               aggregate_seq bigint, leased boolean)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
/*query:wake_successors*/
$fn$;

REVOKE ALL ON FUNCTION /*schema*/relay_wake_successors(text[], uuid[], bigint[], bigint, integer,
                                                       integer, boolean)
    FROM PUBLIC;

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
CREATE OR REPLACE FUNCTION /*schema*/receive(handler text, max integer DEFAULT 10,
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
    -- transaction are due after its now(), so no lease takes one twice; rows
    -- woken behind the heads it finished are due now, for its next pass.
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
            -- The rows waiting behind these heads, made due now and leased to
            -- no one: this call hands out only what it claimed in the ledger,
            -- so the next lease takes them (this call's next pass, or the
            -- next call), and claims them for its handler.
            PERFORM /*schema*/relay_wake_successors(w_types, w_aggs, w_seqs, 100, 60, 5, false);
        END IF;
    END LOOP;
END
$fn$;

-- CREATE OR REPLACE keeps receive()'s owner, its SECURITY DEFINER and its
-- grants (0020: none for PUBLIC, EXECUTE for outbox_consumer).
