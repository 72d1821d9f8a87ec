/* SPDX-License-Identifier: MIT */
/*
 * test_metrics_lease.c - the relay's hot-path health on /metrics: rows
 * whose lease ran out (a relay died holding them) are counted once each as
 * the next relay takes them over, and the rows a lease reads from the
 * table are sampled with the outbox's other gauges.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "harness.h"
#include "http_get.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    relay_test_prepare(conn);
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(metrics_lease, .init = setup, .fini = teardown, .timeout = 120);

Test(metrics_lease, rows_taken_over_after_their_lease_ran_out_are_counted_once_each)
{
    struct harness_proc relay;
    struct relay_env env;
    char addr[64], *body;
    int port = http_free_port();

    /* 30 rows that came back (after created_at: the row lease's) and a dead relay leased,
     * their lease run out a second ago, and 20 fresh ones. */
    relay_test_enqueue(conn, 30);
    harness_exec(conn,
                 "UPDATE outbox.events SET status = 'leased', "
                 "next_attempt_at = created_at + interval '1 millisecond', "
                 "lease_token = gen_random_uuid(), leased_until = now() - interval '1 second'");
    relay_test_enqueue(conn, 20);
    relay_test_env(&env, "METRICS_LEASE", "metricslease");
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    relay_env_set(&env, "OUTBOX_HTTP_ADDR", addr);
    relay_test_start(&relay, &env, "metrics-lease-1");

    body = http_wait_metric(port, "outbox_relay_published_total", 50);
    cr_expect_eq(http_metric(body, "outbox_relay_lease_expiries_total"), 30, "%s", body);
    free(body);
    cr_expect_eq(relay_test_count(conn, "lease_expiries = 1"), 30);
    /* Sampled every few seconds, like the other gauges of the outbox. */
    body = http_wait_metric(port, "outbox_relay_table_dead_tuples", 1);
    cr_expect_geq(http_metric(body, "outbox_relay_rows_scanned_per_lease"), 0, "%s", body);
    free(body);
    relay_test_stop(&relay, 10000);
    relay_env_fini(&env);
}
