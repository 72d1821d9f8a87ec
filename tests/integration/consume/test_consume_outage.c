/* SPDX-License-Identifier: MIT */
/*
 * test_consume_outage.c - `outboxd consume` through server outages:
 * nats-server killed and restarted, or frozen past the ack wait, under
 * JetStream consumers; PostgreSQL restarted under consumers of both
 * backends; consumers started while PostgreSQL or NATS is down. With
 * OUTBOX_MAX_ATTEMPTS=1 a single spent attempt would dead-letter an event,
 * so "nothing spent, each handler once per event" is checked at its
 * sharpest. No consumer is restarted by hand. Every test stops a server,
 * so the harness runs them one at a time.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "consume_test.h"
#include "harness.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { REPLICAS = 2 };

/* Events of the test: enough to be mid-flight when an outage comes, or a few when it starts in one.
 */
static int events;

static PGconn *conn;

static void
setup(void)
{
    events = 1500;
    harness_servers_exclusive(); /* before connecting: these tests stop servers */
    conn = harness_pg_connect_fresh();
    consume_test_prepare(conn);
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(consume_outage, .init = setup, .fini = teardown, .timeout = 150);

/* A millisecond per event keeps the replicas busy when the outage comes. */
static const char *const handlers[] = {CONSUME_EFFECT("audit"), CONSUME_EFFECT("mailer"),
                                       "pace=sql:SELECT pg_sleep(0.001)", NULL};

/* The test's connection again, after PostgreSQL restarted. */
static void
reconnect(void)
{
    PQfinish(conn);
    conn = PQconnectdb(harness_db_url());
    cr_assert_eq(PQstatus(conn), CONNECTION_OK, "%s", PQerrorMessage(conn));
}

static void
start_replicas(struct harness_proc *p, struct consume_group *g, const char *tag)
{
    relay_env_set(&g->env, "OUTBOX_MAX_ATTEMPTS", "1");
    for (int i = 0; i < REPLICAS; i++) {
        char name[48];

        snprintf(name, sizeof(name), "%s-%d", tag, i + 1);
        consume_test_start(&p[i], &g->env, name, handlers);
    }
}

static int
any_logged(struct harness_proc *p, const char *needle)
{
    for (int i = 0; i < REPLICAS; i++) {
        if (harness_proc_log_contains(&p[i], needle)) {
            return 1;
        }
    }
    return 0;
}

static int
all_handled(void)
{
    return consume_test_handled(conn, "audit") == events &&
           consume_test_handled(conn, "mailer") == events;
}

/* Fails the test if the outage found the work already done: it proved nothing then. */
static void
expect_outage_mid_flight(void)
{
    cr_assert_lt(consume_test_handled(conn, "mailer"), events,
                 "the outage came too late to matter");
}

/* After the outage: everything handled once by the same replicas, nothing spent. */
static void
expect_recovered(struct harness_proc *p, struct consume_group *g)
{
    long long started = harness_now_ms();

    HARNESS_WAIT_UNTIL(all_handled(), 60000);
    if (g->jetstream) {
        HARNESS_WAIT_UNTIL(consume_test_nats_drained(g->stream, g->consumer), 30000);
    } else {
        HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    }
    cr_log_info("%s: settled %lld ms after recovery", g->stream, harness_now_ms() - started);
    for (int i = 0; i < REPLICAS; i++) {
        consume_test_assert_running(&p[i], "a consumer (it must ride out the outage)");
        consume_test_stop(&p[i], 10000);
    }
    consume_test_expect_exactly_once(conn, "audit");
    consume_test_expect_exactly_once(conn, "mailer");
    consume_test_expect_nothing_spent(conn);
}

Test(consume_outage, nats_killed_and_restarted_under_the_consumers_spends_no_attempt)
{
    struct harness_proc replicas[REPLICAS];
    struct consume_group g;

    consume_group_init(&g, "jetstream", "NATSKILL", NULL);
    relay_test_enqueue(conn, events);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    start_replicas(replicas, &g, "natskill");
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "mailer") >= events / 5, 30000);
    harness_nats_kill(SIGKILL);
    HARNESS_WAIT_UNTIL(any_logged(replicas, "nats disconnected"), 10000);
    expect_outage_mid_flight();
    harness_nats_start();
    expect_recovered(replicas, &g);
    consume_group_fini(&g);
}

Test(consume_outage, nats_frozen_past_the_ack_wait_under_the_consumers_spends_no_attempt)
{
    struct harness_proc replicas[REPLICAS];
    struct consume_group g;

    consume_group_init(&g, "jetstream", "NATSSTOP", NULL);
    relay_test_enqueue(conn, events);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    start_replicas(replicas, &g, "natsstop");
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "mailer") >= events / 5, 30000);
    harness_nats_kill(SIGSTOP);
    expect_outage_mid_flight();
    /* Not waiting for a condition: the freeze outlasts the 2 s ack wait. */
    harness_sleep_ms(3000);
    harness_nats_kill(SIGCONT);
    expect_recovered(replicas, &g);
    consume_group_fini(&g);
}

static void
postgresql_restarted_under_the_consumers(const char *bus)
{
    struct harness_proc replicas[REPLICAS];
    struct consume_group g;

    consume_group_init(&g, bus, "PGRESTART", NULL);
    relay_test_enqueue(conn, events);
    if (g.jetstream) {
        HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    }
    start_replicas(replicas, &g, "pgrestart");
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "mailer") >= events / 5, 30000);
    expect_outage_mid_flight(); /* checked first: the database cannot answer during it */
    harness_pg_stop("immediate");
    HARNESS_WAIT_UNTIL(any_logged(replicas, "database unavailable"), 10000);
    harness_pg_start();
    reconnect();
    expect_recovered(replicas, &g);
    consume_group_fini(&g);
}

Test(consume_outage, postgresql_restarted_under_jetstream_consumers_spends_no_attempt)
{
    postgresql_restarted_under_the_consumers("jetstream");
}

Test(consume_outage, postgresql_restarted_under_db_backend_consumers_spends_no_attempt)
{
    postgresql_restarted_under_the_consumers("db");
}

static void
started_while_postgresql_is_down(const char *bus)
{
    struct harness_proc replicas[REPLICAS];
    struct consume_group g;

    consume_group_init(&g, bus, "PGDOWN", NULL);
    events = 300;
    relay_test_enqueue(conn, events);
    if (g.jetstream) {
        HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    }
    harness_pg_stop("fast");
    start_replicas(replicas, &g, "pgdown");
    HARNESS_WAIT_UNTIL(any_logged(replicas, "database unavailable"), 20000);
    consume_test_assert_running(&replicas[0], "a consumer started without its database");
    harness_pg_start();
    reconnect();
    expect_recovered(replicas, &g);
    consume_group_fini(&g);
}

Test(consume_outage, a_jetstream_consumer_started_while_postgresql_is_down_connects_when_it_is_up)
{
    started_while_postgresql_is_down("jetstream");
}

Test(consume_outage, a_db_backend_consumer_started_while_postgresql_is_down_connects_when_it_is_up)
{
    started_while_postgresql_is_down("db");
}

Test(consume_outage, a_consumer_started_while_nats_is_down_connects_when_it_comes_up)
{
    struct harness_proc replicas[REPLICAS];
    struct consume_group g;

    consume_group_init(&g, "jetstream", "NATSDOWN", NULL);
    events = 300;
    relay_test_enqueue(conn, events);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    harness_nats_kill(SIGKILL);
    start_replicas(replicas, &g, "natsdown");
    HARNESS_WAIT_UNTIL(any_logged(replicas, "feed unavailable"), 20000);
    consume_test_assert_running(&replicas[0], "a consumer started without NATS");
    cr_assert_eq(consume_test_handled(conn, "audit"), 0, "handled without a feed");
    harness_nats_start();
    expect_recovered(replicas, &g);
    consume_group_fini(&g);
}
