/* SPDX-License-Identifier: MIT */
/*
 * test_behind_pgbouncer.c - `outboxd relay` and `outboxd consume` with
 * every database connection through PgBouncer in transaction mode (the
 * fleet default), relays polling (OUTBOX_LISTEN=0), while a writer commits
 * through it: each committed event reaches the stream once and its handler
 * runs once (FAULTS.md §1's checks). The relay connects as a user of its
 * own, so PgBouncer gives it a pool of its own (docs/writing-events.md):
 * its session settings (synchronous_commit=off among them) never reach the
 * server connections that the writer and the consumer's ledger commit on,
 * which the test samples. The pool hands each transaction to its least
 * recently used server connection, so the relay's statements, prepared by
 * name, keep meeting connections that lack them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "consume_test.h"
#include "harness.h"
#include "relay_check.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { EVENTS = 300, PER_TRANSACTION = 10 };

/* Each transaction on the least recently used server connection, as on a busy pool. */
#define BUSY_POOL "server_round_robin = 1\n"

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    consume_test_prepare(conn);
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(pgbouncer, .init = setup, .fini = teardown, .timeout = 120);

/* The relay's own login; roles are the cluster's, so another test may have made it. */
static void
create_relay_role(void)
{
    harness_exec(conn, "DO $$BEGIN CREATE ROLE " HARNESS_PGBOUNCER_RELAY_USER
                       " LOGIN SUPERUSER; EXCEPTION WHEN duplicate_object OR unique_violation "
                       "THEN NULL; END$$");
}

/* Fails if any of `samples` statements through `writer` ran with synchronous_commit off. */
static void
expect_durable_commits(PGconn *writer, int samples)
{
    for (int i = 0; i < samples; i++) {
        char *v = harness_scalar_text(writer, "SELECT current_setting('synchronous_commit')");

        cr_assert_str_eq(v, "on", "a writer's server connection has synchronous_commit=%s", v);
        free(v);
    }
}

static long long
handled(void)
{
    return consume_test_handled(conn, "stats");
}

Test(pgbouncer, relay_and_consumer_in_transaction_mode_deliver_each_event_once)
{
    struct harness_pgbouncer pb;
    struct relay_env relay_env, consumer_env;
    struct harness_proc relay, consumer;
    const char *const handlers[] = {CONSUME_EFFECT("stats"), NULL};
    char *via, *url, relay_url[512];
    PGconn *writer;

    create_relay_role();
    harness_pgbouncer_start_with(&pb, harness_pg_port(), "transaction", BUSY_POOL);
    via = harness_db_url_via(pb.port);
    url = relay_test_db_url_with_secret(via);
    snprintf(relay_url, sizeof(relay_url),
             "postgresql://" HARNESS_PGBOUNCER_RELAY_USER ":" RELAY_TEST_SECRET "@127.0.0.1:%d/%s",
             pb.port, PQdb(conn));
    relay_test_env(&relay_env, "PB_TX", "pbtx");
    relay_env_set(&relay_env, "OUTBOX_DATABASE_URL", relay_url);
    relay_env_set(&relay_env, "OUTBOX_LISTEN", "0"); /* LISTEN cannot pass a transaction pooler */
    consume_test_env(&consumer_env, "jetstream", "PB_TX", "pbtx", "G_PB_TX");
    relay_env_set(&consumer_env, "OUTBOX_DATABASE_URL", url);
    relay_test_start(&relay, &relay_env, "pooled-relay");
    consume_test_start(&consumer, &consumer_env, "pooled-consumer", handlers);

    writer = PQconnectdb(via);
    cr_assert_eq(PQstatus(writer), CONNECTION_OK, "%s", PQerrorMessage(writer));
    for (int i = 0; i < EVENTS / PER_TRANSACTION; i++) {
        relay_test_enqueue(writer, PER_TRANSACTION);
        expect_durable_commits(writer, 2);
    }
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 60000);
    HARNESS_WAIT_UNTIL(handled() == EVENTS, 60000);
    expect_durable_commits(writer, 50);
    consume_test_stop(&consumer, 10000);
    relay_test_stop(&relay, 10000);

    cr_assert_eq(relay_test_check(conn, "PB_TX").stream, EVENTS);
    consume_test_expect_exactly_once(conn, "stats");
    PQfinish(writer);
    harness_pgbouncer_stop(&pb);
    relay_env_fini(&consumer_env);
    relay_env_fini(&relay_env);
    free(url);
    free(via);
}
