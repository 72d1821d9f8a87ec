-- 0009_retention_any_id_and_size_setting: retention reaches every row,
-- whatever its id; outbox.max_envelope_bytes is checked like the C
-- writer's setting.
--
-- Retention. prune_done and ledger_prune scan the primary key below the
-- UUIDv7 of (now - retention): ids are time-ordered, so the rows old
-- enough are a key range and no index on a time column is needed. An id
-- that claims a later time than the row's own is never in that range in
-- time: a foreign writer's gen_random_uuid() (v4: its first 48 bits read
-- as a time up to the year 10889, past 2026 for 99.4 % of them), or a v7
-- stamped in the future by a wrong clock or by hand. Such rows were
-- published, then kept forever. The indexes below hold exactly those rows,
-- ordered by a time that pgoutbox itself writes from the database's clock
-- (published_at when the relay publishes, started_at when a consumer
-- claims), so the prune reads them in that order and stops at the first
-- row not yet due. A row whose id is at most 5 minutes ahead of that time
-- (a writer's clock a little fast) stays out of them: the key-range scan
-- reaches it at most 5 minutes late.
--
-- Neither index costs the hot path an update that was HOT: the outbox's
-- predicate reads id and published_at, which only the finish and a
-- requeue write (already not HOT: events_due_idx's predicate reads
-- published_at); the ledger's reads event_id and started_at, which a
-- mark-done does not touch (only a claim's takeover rewrites started_at).
-- A writer's id that is a true UUIDv7 adds no entry.
--
-- Building each index reads its whole table once under a lock that
-- stops writes to it (a migration runs in a transaction, so CONCURRENTLY
-- is not possible): about a second per million rows.

-- The time a UUIDv7 says (its first 48 bits, Unix milliseconds) is more
-- than 5 minutes after `at`: a key the retention's key-range scan reaches
-- late or never. Read from any uuid, whatever its version. Only built-in
-- immutable functions, so it is inlined into the index predicates below
-- and into the queries that must match them. NULL `at`: NULL.
CREATE FUNCTION /*schema*/uuid_v7_after(id uuid, at timestamptz)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT to_timestamp((('x' || translate(left($1::text, 13), '-', ''))::bit(48)::bigint
                         - 300000)::double precision / 1000) > $2
$fn$;

CREATE INDEX events_off_key_order_idx ON /*schema*/events (published_at)
    WHERE /*schema*/uuid_v7_after(id, published_at);

CREATE INDEX processed_events_off_key_order_idx ON /*schema*/processed_events (started_at)
    WHERE /*schema*/uuid_v7_after(event_id, started_at);
