-- 0002_relay: the relay's helpers (backoff, the v7 id of an instant) and the wake-up trigger.
--
-- Every table and function name is preceded by the schema marker, which
-- the migrator replaces with the quoted OUTBOX_SCHEMA.

-- How long to wait after failure number `attempt` (1-based): base_ms,
-- doubling, at most cap_ms, then scaled by 0.9 + 0.2 * jitter_unit (so
-- +-10 %; jitter_unit is random() in [0,1), 0.5 means no jitter). The
-- same float8 arithmetic in the same order as obx_backoff_delay_ms() in
-- src/worker/backoff.c, so both give the same milliseconds; a test
-- compares them. The exponent stops at 40 so huge attempts cannot overflow.
CREATE FUNCTION /*schema*/backoff_ms(attempt integer, base_ms integer, cap_ms integer,
                                     jitter_unit double precision)
RETURNS integer LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT least(floor(least(greatest(base_ms, 0)::double precision
                                 * power(2::double precision, least(greatest(attempt, 1) - 1, 40)),
                             greatest(cap_ms, 0)::double precision)
                       * (0.9::double precision
                          + 0.2::double precision * least(greatest(jitter_unit, 0), 1))),
                 2147483647)::integer
$fn$;

-- The smallest UUIDv7 of the millisecond `at` falls in (random bits all
-- zero). Ids are time-ordered, so `id < uuid_v7_floor(t)` is a range scan
-- of the primary key over the rows created before t: that is how pruning
-- finds old rows without an index on published_at.
CREATE FUNCTION /*schema*/uuid_v7_floor(at timestamptz)
RETURNS uuid LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT encode(substring(int8send(floor(extract(epoch FROM at) * 1000)::bigint) FROM 3)
                  || decode('70008000000000000000', 'hex'),
                  'hex')::uuid
$fn$;

-- The wake-up channel of a schema: outbox_wakeup_<schema>, or a hash of
-- the schema when that would not fit a 63-byte channel name.
CREATE FUNCTION /*schema*/wakeup_channel(schema_name text)
RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT CASE WHEN octet_length('outbox_wakeup_' || schema_name) <= 63
                THEN 'outbox_wakeup_' || schema_name
                ELSE 'outbox_wakeup_' || md5(schema_name) END
$fn$;

-- LISTEN on a schema's wake-up channel. LISTEN takes no parameters, so the
-- relay calls this instead of building the statement text itself.
CREATE FUNCTION /*schema*/wakeup_listen(schema_name text)
RETURNS void LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    EXECUTE format('LISTEN %I', /*schema*/wakeup_channel(schema_name));
END
$fn$;

-- Wakes the relays when events are inserted, without serializing the
-- writers: every transaction that NOTIFYs takes a global lock at commit,
-- so only the writer transaction that wins this try-lock (key "obxw" and
-- the schema) notifies; the others, in flight at the same moment, skip it.
-- Their rows are found by the relay, which keeps leasing while batches come
-- back full, or by its poll. Transaction-scoped, so nothing is left behind.
CREATE FUNCTION /*schema*/events_wakeup()
RETURNS trigger LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF pg_try_advisory_xact_lock(1868724343, hashtext(TG_TABLE_SCHEMA)) THEN
        PERFORM pg_notify(/*schema*/wakeup_channel(TG_TABLE_SCHEMA), '');
    END IF;
    RETURN NULL;
END
$fn$;

-- Once per INSERT statement, not per row: a batch insert costs one try-lock.
CREATE TRIGGER events_wakeup AFTER INSERT ON /*schema*/events
    FOR EACH STATEMENT EXECUTE FUNCTION /*schema*/events_wakeup();
