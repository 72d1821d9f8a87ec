/* SPDX-License-Identifier: MIT */
/*
 * test_roles.c - `outboxctl roles`: each role logs in and does its job,
 * and nothing more. The writer enqueues but cannot read, update or delete
 * events; the relay publishes the outbox (a real `outboxd relay`) but
 * cannot touch the ledger or an event's envelope; the consumer runs its
 * handlers (a real `outboxd consume`) but cannot read events; the admin
 * runs outboxctl's verbs; none can drop, alter or truncate a table. Safe
 * to run twice; --print shows the same SQL.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "consume_test.h"
#include "ctl_test.h"
#include "harness.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    relay_test_prepare(conn);
    harness_exec(conn, "CREATE TABLE public.effects (event_id uuid NOT NULL, handler text NOT "
                       "NULL)");
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(ctl_roles, .init = setup, .fini = teardown, .timeout = 150);

/* The test database's conninfo as `role` (key=value; malloc'd). */
static char *
url_as(const char *role)
{
    PQconninfoOption *opts = PQconninfoParse(harness_db_url(), NULL);
    size_t cap = 1024, used = 0;
    char *out = malloc(cap);

    cr_assert(opts != NULL && out != NULL);
    out[0] = '\0';
    for (PQconninfoOption *o = opts; o->keyword != NULL; o++) {
        if (o->val != NULL && o->val[0] != '\0' && strcmp(o->keyword, "user") != 0 &&
            strcmp(o->keyword, "password") != 0) {
            used += (size_t)snprintf(out + used, cap - used, "%s='%s' ", o->keyword, o->val);
        }
    }
    snprintf(out + used, cap - used, "user=%s", role);
    PQconninfoFree(opts);
    return out;
}

static PGconn *
login(const char *role)
{
    char *url = url_as(role);
    PGconn *c = PQconnectdb(url);

    cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s cannot log in: %s", role, PQerrorMessage(c));
    free(url);
    return c;
}

/* `sql` as the role of `c` must be refused for lack of privilege (42501). */
static void
denied(PGconn *c, const char *sql)
{
    PGresult *res = PQexec(c, sql);
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

    cr_assert(state != NULL && strcmp(state, "42501") == 0, "%s: %s may run %s (%s)", PQuser(c),
              PQuser(c), sql, state ? PQresultErrorMessage(res) : "it succeeded");
    PQclear(res);
}

static void
allowed(PGconn *c, const char *sql)
{
    PGresult *res = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(res);

    cr_assert(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK, "%s cannot run %s: %s", PQuser(c),
              sql, PQresultErrorMessage(res));
    PQclear(res);
}

static void
cannot_change_tables(PGconn *c)
{
    denied(c, "DROP TABLE outbox.events");
    denied(c, "ALTER TABLE outbox.events ADD COLUMN extra int");
    denied(c, "TRUNCATE outbox.processed_events");
    denied(c, "DROP TABLE outbox.dead_letters");
}

Test(ctl_roles, each_role_does_its_job_and_nothing_more)
{
    struct relay_env env, renv;
    struct consume_group g;
    struct harness_proc relay, consumer;
    struct ctl_run r;
    char *url;
    PGconn *writer, *relay_conn, *consumer_conn, *admin;

    relay_test_env(&env, "ROLES", "roles");
    ctl_expect(&r, &env, 0, (const char *const[]){"roles", NULL});
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 0, (const char *const[]){"roles", NULL}); /* again: nothing breaks */
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 0, (const char *const[]){"roles", "--print", NULL});
    cr_assert(strstr(r.out, "GRANT INSERT ON \"outbox\".events TO outbox_writer;") != NULL, "%s",
              r.out);
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 0, (const char *const[]){"roles", "--dry-run", NULL});
    cr_assert(strstr(r.out, "REVOKE ALL ON SCHEMA \"outbox\" FROM PUBLIC;") != NULL, "%s", r.out);
    ctl_run_fini(&r);

    /* The writer enqueues, and cannot read, change or delete what it wrote. */
    writer = login("outbox_writer");
    allowed(writer, "BEGIN");
    allowed(writer, "SELECT outbox.enqueue('movie', gen_random_uuid(), 'review.logged', '{}')");
    allowed(writer, "COMMIT");
    allowed(writer, "INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, "
                    "envelope) SELECT i, 'movie', a, 'review.logged', jsonb_build_object('id', i, "
                    "'event_type', 'review.logged', 'aggregate_type', 'movie', 'aggregate_id', a, "
                    "'occurred_at', '2026-11-29T09:41:56.123Z', 'schema_version', 1, 'payload', "
                    "'{}'::jsonb) FROM (SELECT gen_random_uuid() AS i, gen_random_uuid() AS a) v");
    denied(writer, "SELECT * FROM outbox.events");
    denied(writer, "UPDATE outbox.events SET attempts = 1");
    denied(writer, "DELETE FROM outbox.events");
    denied(writer, "SELECT * FROM outbox.processed_events");
    cannot_change_tables(writer);
    PQfinish(writer);
    harness_exec(conn, "INSERT INTO public.committed SELECT id FROM outbox.events");

    /* The relay publishes both, and cannot touch the ledger or an envelope. */
    url = url_as("outbox_relay");
    relay_env_init(&renv, url, harness_nats_url(), "ROLES", "roles");
    free(url);
    relay_test_start(&relay, &renv, "roles-relay");
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    relay_test_stop(&relay, 10000);
    relay_test_check(conn, "ROLES");
    relay_conn = login("outbox_relay");
    denied(relay_conn, "SELECT * FROM outbox.processed_events");
    denied(relay_conn, "INSERT INTO outbox.processed_events (event_id, handler) VALUES "
                       "(gen_random_uuid(), 'x')");
    denied(relay_conn, "UPDATE outbox.events SET envelope = '{}'");
    denied(relay_conn, "SELECT * FROM outbox.handlers");
    cannot_change_tables(relay_conn);
    PQfinish(relay_conn);

    /* The consumer runs its handler once per event, and cannot read the outbox. */
    harness_exec(conn, "GRANT INSERT ON public.effects TO outbox_consumer");
    consume_group_init(&g, "jetstream", "ROLES", NULL);
    url = url_as("outbox_consumer");
    relay_env_set(&g.env, "OUTBOX_DATABASE_URL", url);
    free(url);
    harness_exec(conn, "TRUNCATE public.committed"); /* the group's stream has these alone */
    relay_test_enqueue(conn, 5);
    consume_test_start(&consumer, &g.env, "roles-consumer",
                       (const char *const[]){CONSUME_EFFECT("roles"), NULL});
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "roles") == 5, 30000);
    HARNESS_WAIT_UNTIL(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.handlers WHERE name "
                                               "= 'roles'") == 1,
                       10000);
    consume_test_stop(&consumer, 10000);
    consume_test_expect_exactly_once(conn, "roles");
    consumer_conn = login("outbox_consumer");
    /* Its registration took the handler's order baseline (migration 0016), and it may
     * check an ordered event's order: an early one is parked. */
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.handler_baselines "
                                         "WHERE handler = 'roles'"),
                 1);
    {
        char *state = harness_scalar_text(
            consumer_conn,
            "SELECT state FROM outbox.ledger_claim_ordered('roles', "
            "ARRAY[gen_random_uuid()], 30, 1000, false, ARRAY['order'], "
            "ARRAY[gen_random_uuid()], ARRAY[2::bigint], ARRAY['m'], ARRAY['s'], ARRAY['{}'])");

        cr_assert_str_eq(state, "parked");
        free(state);
    }
    /* The ledger's SQL API (migration 0018) is the consumer's too, ordered claims included. */
    allowed(consumer_conn, "BEGIN");
    allowed(consumer_conn, "SELECT outbox.try_claim(gen_random_uuid(), 'roles-sql')");
    allowed(consumer_conn, "COMMIT");
    {
        char *token = harness_scalar_text(
            consumer_conn, "SELECT outbox.claim('1b2c7d3e-0000-4000-8000-000000000001', "
                           "'roles-sql', 30, '{\"id\": \"1b2c7d3e-0000-4000-8000-000000000001\", "
                           "\"aggregate_type\": \"order\", \"aggregate_id\": "
                           "\"1b2c7d3e-0000-4000-8000-0000000000aa\", \"aggregate_seq\": 1}')");
        char sql[256];

        cr_assert_eq(strlen(token), 36, "%s", token);
        snprintf(sql, sizeof(sql),
                 "SELECT outbox.complete('1b2c7d3e-0000-4000-8000-000000000001', 'roles-sql', "
                 "'%s')",
                 token);
        allowed(consumer_conn, sql);
        free(token);
    }
    allowed(consumer_conn, "SELECT * FROM outbox.fail(gen_random_uuid(), 'roles-sql', NULL, 'x')");
    {
        PGconn *writer_conn = login("outbox_writer");

        denied(writer_conn, "SELECT * FROM outbox.receive('roles-pull', 10, 30)");
        PQfinish(writer_conn);
    }
    denied(consumer_conn, "SELECT * FROM outbox.events");
    denied(consumer_conn, "UPDATE outbox.events SET status = 'done'");
    denied(consumer_conn, "DELETE FROM outbox.dead_letters");
    cannot_change_tables(consumer_conn);
    PQfinish(consumer_conn);

    /* The admin runs outboxctl's verbs, and cannot change the tables either. */
    url = url_as("outbox_admin");
    relay_env_set(&g.env, "OUTBOX_DATABASE_URL", url);
    free(url);
    ctl_expect(&r, &g.env, 0, (const char *const[]){"status", "--json", NULL});
    cr_assert_eq(ctl_int(json_array_get(r.lines, 0), "done"), 7);
    ctl_run_fini(&r);
    ctl_expect(&r, &g.env, 0, (const char *const[]){"dead", "list", NULL});
    ctl_run_fini(&r);
    ctl_expect(&r, &g.env, 0, (const char *const[]){"erase", "--data-subject", "nobody", NULL});
    ctl_run_fini(&r);
    admin = login("outbox_admin");
    cannot_change_tables(admin);
    PQfinish(admin);
    consume_group_fini(&g);
    /* receive() (migration 0020) leases the outbox rows the consumer may not read itself
     * (once the group's relay, which would publish them, is stopped). */
    harness_exec(conn, "SELECT outbox.enqueue('order', gen_random_uuid(), 'changed', '{}')");
    {
        PGconn *puller = login("outbox_consumer");
        PGresult *rows = PQexec(puller, "SELECT event_id, token "
                                        "FROM outbox.receive('roles-pull', 10, 30)");
        char sql[256];

        cr_assert_eq(PQresultStatus(rows), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(rows));
        cr_assert_eq(PQntuples(rows), 1);
        for (int i = 0; i < PQntuples(rows); i++) {
            snprintf(sql, sizeof(sql), "SELECT outbox.complete('%s', 'roles-pull', '%s')",
                     PQgetvalue(rows, i, 0), PQgetvalue(rows, i, 1));
            allowed(puller, sql);
        }
        PQclear(rows);
        PQfinish(puller);
    }
    relay_env_fini(&renv);
    relay_env_fini(&env);
}
