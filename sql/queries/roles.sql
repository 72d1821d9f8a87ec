-- roles: least-privilege roles for one outbox schema, for outboxctl roles.
-- A script (several statements, no parameters): outboxctl roles runs it in
-- one transaction, outboxctl roles --print prints it. Besides the usual
-- table marker, a second marker (schema_name, in a comment) stands where
-- the schema's own name goes. Safe to run again, and once per schema: the roles
-- are created once, the grants added per schema. Run it again after a
-- migration that adds tables.
--
--   outbox_writer    may only enqueue: INSERT into events (through
--                    outbox.enqueue() or the C writer); cannot read, update
--                    or delete a row.
--   outbox_relay     leases, publishes and finishes rows: reads events,
--                    updates only their delivery columns, deletes (prune
--                    mode, retention), writes the relay's dead letters;
--                    no access to the ledger or the handlers table.
--   outbox_consumer  the ledger (processed_events: claim, done, failures,
--                    retention), dead letters and its handlers bindings; no
--                    access to events, but outbox.receive() leases them for
--                    it. A DB-backend consumer (outboxd consume) leases
--                    events too: give its login both outbox_consumer and
--                    outbox_relay. A handler's own tables are granted apart.
--   outbox_admin     outboxctl: reads and changes rows of every table,
--                    sees every session (pg_read_all_stats, for doctor).
-- None owns a table, so none can drop, alter or truncate one: migrations
-- run as the schema's owner. The roles can log in but have no password:
-- set one (ALTER ROLE outbox_relay PASSWORD '...') or make them groups of
-- your own login roles (GRANT outbox_relay TO billing_relay).
DO $roles$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['outbox_writer', 'outbox_relay', 'outbox_consumer', 'outbox_admin']
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE '
                           'NOREPLICATION NOBYPASSRLS', r);
        END IF;
    END LOOP;
END
$roles$;

REVOKE ALL ON SCHEMA /*schema_name*/ FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA /*schema_name*/ FROM PUBLIC;
GRANT USAGE ON SCHEMA /*schema_name*/ TO outbox_writer, outbox_relay, outbox_consumer, outbox_admin;

GRANT INSERT ON /*schema*/events TO outbox_writer;

GRANT SELECT, DELETE ON /*schema*/events TO outbox_relay;
GRANT UPDATE (status, attempts, lease_expiries, next_attempt_at, leased_until, lease_token,
              last_error, published_at, stream_seq) ON /*schema*/events TO outbox_relay;
GRANT SELECT, INSERT, UPDATE ON /*schema*/dead_letters TO outbox_relay;
-- The window claim's cursor and claim rows (0010).
GRANT SELECT, INSERT, UPDATE, DELETE ON /*schema*/relay_cursor, /*schema*/relay_claims TO outbox_relay;
GRANT SELECT, UPDATE ON /*schema*/relay_floor TO outbox_relay;
GRANT SELECT ON /*schema*/schema_migrations TO outbox_relay;
-- Ordered schemas: the gaps an operator skipped (0015).
GRANT SELECT ON /*schema*/aggregate_skips TO outbox_relay, outbox_consumer;

GRANT SELECT, INSERT, UPDATE, DELETE ON /*schema*/processed_events TO outbox_consumer;
GRANT SELECT, INSERT, UPDATE ON /*schema*/dead_letters TO outbox_consumer;
GRANT SELECT, INSERT, UPDATE ON /*schema*/handlers TO outbox_consumer;
GRANT SELECT ON /*schema*/schema_migrations TO outbox_consumer;
-- Ordered schemas: each handler's progress per aggregate and its parked events (0017).
GRANT SELECT, INSERT, UPDATE ON /*schema*/handler_progress TO outbox_consumer;
GRANT SELECT ON /*schema*/handler_baselines TO outbox_consumer;
GRANT SELECT, INSERT, UPDATE, DELETE ON /*schema*/parked_events TO outbox_consumer;
GRANT EXECUTE ON FUNCTION /*schema*/ledger_order_baseline(text) TO outbox_consumer;
-- The SQL API's claim() keeps an ordered claim's number for complete() (0018).
GRANT SELECT, INSERT, UPDATE, DELETE ON /*schema*/claim_orders TO outbox_consumer;
-- receive() (0020) leases outbox rows for the consumer, as its definer: the
-- consumer still cannot read or change events itself.
GRANT EXECUTE ON FUNCTION /*schema*/receive(text, integer, integer) TO outbox_consumer;

GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA /*schema_name*/ TO outbox_admin;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA /*schema_name*/ TO outbox_admin;
GRANT pg_read_all_stats TO outbox_admin;
-- outboxctl ordering on|off (0014): the switch runs as the schema's owner.
GRANT EXECUTE ON FUNCTION /*schema*/set_ordering(boolean) TO outbox_admin;

-- The daemons' sessions bound their idle transactions themselves; these
-- bound every other session of the roles (psql, a script) the same way.
ALTER ROLE outbox_relay SET idle_in_transaction_session_timeout = '60s';
ALTER ROLE outbox_consumer SET idle_in_transaction_session_timeout = '60s';
ALTER ROLE outbox_admin SET idle_in_transaction_session_timeout = '60s';
