/* SPDX-License-Identifier: MIT */
/*
 * test_consume_exec.c - an exec: handler runs its children concurrently,
 * up to its in-flight limit (8 by default, the in_flight option), each
 * event claimed before its child starts and marked done after exit 0; two
 * events of one aggregate never run at once, and run in the order they
 * were written.
 *
 * Every child registers itself in a directory while it runs and writes how
 * many were registered when it started: the overlap the test asserts on
 * is observed, not inferred from wall time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "consume_test.h"
#include "harness.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;
static char dir[64];

static void
setup(void)
{
    consume_test_suite_begin(&conn, dir);
}

static void
teardown(void)
{
    consume_test_suite_end(&conn, dir);
}

TestSuite(consume_exec, .init = setup, .fini = teardown, .timeout = 120);

/*
 * A child that sleeps 200 ms while registered in $CONSUME_DIR/run, writes
 * the count of registered children at its start to `overlap` and its event
 * id to `done` (in the order the children ended).
 */
#define SLEEPER                                                                    \
    "mkdir -p \"$CONSUME_DIR/run\"; touch \"$CONSUME_DIR/run/$OUTBOX_EVENT_ID\"; " \
    "ls \"$CONSUME_DIR/run\" | wc -l >> \"$CONSUME_DIR/overlap\"; sleep 0.2; "     \
    "rm \"$CONSUME_DIR/run/$OUTBOX_EVENT_ID\"; echo \"$OUTBOX_EVENT_ID\" >> \"$CONSUME_DIR/done\""

/* The most children the log saw registered at once. */
static long long
max_overlap(void)
{
    char path[512], line[64];
    long long most = 0;
    FILE *f;

    snprintf(path, sizeof(path), "%s/overlap", dir);
    f = fopen(path, "r");
    cr_assert_not_null(f, "no child ran");
    while (fgets(line, sizeof(line), f) != NULL) {
        long long n = strtoll(line, NULL, 10);

        most = n > most ? n : most;
    }
    fclose(f);
    return most;
}

/* Runs `spec` over the events committed, on the DB backend, until every one is done. */
static void
consume_all(const char *spec, const char *tag, long long events)
{
    const char *const handlers[] = {spec, NULL};
    struct harness_proc consumer;
    struct relay_env env;

    consume_test_env(&env, "db", tag, tag, tag);
    relay_env_set(&env, "CONSUME_DIR", dir);
    consume_test_start(&consumer, &env, "exec-1", handlers);
    HARNESS_WAIT_UNTIL(consume_test_lines(dir, "done", "") >= events ||
                           harness_proc_wait(&consumer, 0) != -1,
                       60000);
    consume_test_assert_running(&consumer, "the consumer");
    HARNESS_WAIT_UNTIL(harness_scalar_ll(conn,
                                         "SELECT count(*) FROM outbox.processed_events "
                                         "WHERE handler = 'sleeper' AND status = 'done'") == events,
                       20000);
    consume_test_stop(&consumer, 10000);
    relay_env_fini(&env);
    cr_assert_eq(consume_test_lines(dir, "done", ""), events, "a child ran twice");
    consume_test_expect_nothing_spent(conn);
}

Test(consume_exec, children_run_concurrently_up_to_the_default_limit_of_8)
{
    enum { EVENTS = 20 };
    long long most;

    relay_test_enqueue(conn, EVENTS);
    consume_all("sleeper=exec:" SLEEPER, "execdef", EVENTS);
    most = max_overlap();
    cr_log_info("20 children of 200 ms: at most %lld at once", most);
    cr_assert_geq(most, 3, "children ran one at a time (at most %lld at once)", most);
    cr_assert_leq(most, 8, "%lld children ran at once, past the default limit of 8", most);
}

Test(consume_exec, the_in_flight_option_bounds_the_children_at_once)
{
    enum { EVENTS = 12 };
    long long most;

    relay_test_enqueue(conn, EVENTS);
    consume_all("sleeper=exec[in_flight=2]:" SLEEPER, "exectwo", EVENTS);
    most = max_overlap();
    cr_assert_eq(most, 2, "in_flight=2, yet at most %lld children at once", most);
}

Test(consume_exec, events_of_one_aggregate_run_one_at_a_time_in_the_order_written)
{
    enum { EVENTS = 8 };
    char want[EVENTS][40], path[512], line[64];
    FILE *f;

    for (int i = 0; i < EVENTS; i++) {
        PGresult *res = PQexec(conn, "INSERT INTO committed SELECT outbox.enqueue('movie', "
                                     "'0190a000-0000-7000-8000-000000000001', 'review.logged', "
                                     "'{}'::jsonb) RETURNING id");

        cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQerrorMessage(conn));
        snprintf(want[i], sizeof(want[i]), "%s", PQgetvalue(res, 0, 0));
        PQclear(res);
    }
    consume_all("sleeper=exec:" SLEEPER, "execagg", EVENTS);
    cr_assert_eq(max_overlap(), 1, "two events of one aggregate ran at once");
    snprintf(path, sizeof(path), "%s/done", dir);
    f = fopen(path, "r");
    cr_assert_not_null(f);
    for (int i = 0; i < EVENTS && fgets(line, sizeof(line), f) != NULL; i++) {
        line[strcspn(line, "\n")] = '\0';
        cr_expect_str_eq(line, want[i], "event %d of the aggregate ran out of order", i + 1);
    }
    fclose(f);
}
