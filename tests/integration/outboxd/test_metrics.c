/* SPDX-License-Identifier: MIT */
/*
 * test_metrics.c - what an operator alerts on, read from the daemons'
 * /metrics while they work: the relay's counters, its lease, finish and
 * publish histograms, the outbox's gauges (the oldest due row during a
 * broker outage, dead tuples, the duplicate window's headroom), and the
 * consumer's claims, per-handler counters and dead letters; both bodies as
 * promtool's parser and linter read them.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "consume_test.h"
#include "harness.h"
#include "http_get.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;

static void
setup(void)
{
    harness_servers_exclusive(); /* one test stops nats-server */
    conn = harness_pg_connect_fresh();
    consume_test_prepare(conn);
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(metrics, .init = setup, .fini = teardown, .timeout = 120);

/* A histogram's buckets only grow, and +Inf equals its _count. */
static void
expect_histogram(const char *body, const char *name, double min_count)
{
    char series[160];
    double count, inf, previous = -1;
    const char *bounds[] = {"0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
                            "0.1",    "0.25",  "0.5",    "1",     "2.5",  "5"};

    snprintf(series, sizeof(series), "%s_count", name);
    count = http_metric(body, series);
    snprintf(series, sizeof(series), "%s_bucket{le=\"+Inf\"}", name);
    inf = http_metric(body, series);
    cr_expect_geq(count, min_count, "%s: %g observations", name, count);
    cr_expect_eq(inf, count, "%s: +Inf bucket %g, count %g", name, inf, count);
    for (size_t i = 0; i < sizeof(bounds) / sizeof(bounds[0]); i++) {
        double v;

        snprintf(series, sizeof(series), "%s_bucket{le=\"%s\"}", name, bounds[i]);
        v = http_metric(body, series);
        cr_expect_geq(v, previous, "%s: bucket le=%s (%g) below the one before", name, bounds[i],
                      v);
        previous = v;
    }
    cr_expect_leq(previous, inf);
}

/* `promtool check metrics` (Prometheus's own parser and linter) accepts the
 * body: no problem reported, exit 0. CI installs it with scripts/install-deps test. */
static void
expect_promtool_accepts(const char *body, const char *daemon)
{
    char path[] = "/tmp/outbox-metrics-XXXXXX", cmd[128], out[4096];
    size_t n = 0, len = strlen(body);
    FILE *p;
    int fd = mkstemp(path), status;

    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, body, len), (ssize_t)len);
    close(fd);
    snprintf(cmd, sizeof(cmd), "promtool check metrics <%s 2>&1", path);
    p = popen(cmd, "r");
    cr_assert_not_null(p);
    while (n + 1 < sizeof(out) && fgets(out + n, (int)(sizeof(out) - n), p) != NULL)
        n += strlen(out + n);
    out[n] = '\0';
    status = pclose(p);
    unlink(path);
    cr_assert(!(WIFEXITED(status) && WEXITSTATUS(status) == 127),
              "promtool not found: run scripts/install-deps test (Debian's prometheus package)");
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0 && n == 0,
              "%s: promtool check metrics (status %d) says:\n%s", daemon, status, out);
}

Test(metrics, a_relay_reports_its_counters_histograms_and_the_outboxs_health)
{
    struct harness_proc relay;
    struct relay_env env;
    char addr[64], *body;
    int port = http_free_port();

    relay_test_enqueue(conn, 200);
    relay_test_env(&env, "METRICS_RELAY", "metricsrelay");
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    relay_env_set(&env, "OUTBOX_HTTP_ADDR", addr);
    relay_env_set(&env, "OUTBOX_DUPLICATE_WINDOW_SECONDS", "600");
    relay_test_start(&relay, &env, "metrics-1");

    body = http_wait_metric(port, "outbox_relay_published_total", 200);
    expect_histogram(body, "outbox_relay_lease_duration_seconds", 1);
    expect_histogram(body, "outbox_relay_finish_duration_seconds", 1);
    expect_histogram(body, "outbox_relay_publish_duration_seconds", 1);
    expect_promtool_accepts(body, "relay");
    free(body);
    /* Sampled every few seconds: dead tuples of the finished rows, nothing waiting. */
    body = http_wait_metric(port, "outbox_relay_table_dead_tuples", 1);
    cr_expect_eq(http_metric(body, "outbox_relay_oldest_due_age_seconds"), 0, "%s", body);
    cr_expect_eq(http_metric(body, "outbox_relay_dedup_headroom_seconds"), 600,
                 "nothing leased: the whole window is headroom\n%s", body);
    cr_expect_eq(http_metric(body, "outbox_dead_letters{handler=\"\"}"), 0);
    cr_expect_geq(http_metric(body, "outbox_relay_claim_index_entries_per_lease"), 0);
    cr_expect_eq(http_metric(body, "outbox_database_up"), 1);
    free(body);

    /* A broker outage: rows wait, and the gauge says how long the oldest has. */
    harness_nats_kill(SIGKILL);
    relay_test_enqueue(conn, 10);
    body = http_wait_metric(port, "outbox_relay_oldest_due_age_seconds", 2);
    cr_expect_eq(http_metric(body, "outbox_broker_up"), 0, "%s", body);
    free(body);
    harness_nats_start();
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 60000);
    relay_test_stop(&relay, 10000);
    relay_env_fini(&env);
}

Test(metrics, a_consumer_reports_claims_and_each_handlers_counters_and_dead_letters)
{
    const char *handlers[] = {CONSUME_EFFECT("audit"), "broken=sql:SELECT 1/0", NULL};
    struct consume_group g;
    struct harness_proc c;
    char addr[64], *body;
    int port = http_free_port();

    consume_group_init(&g, "db", "METRICS", NULL);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    relay_env_set(&g.env, "OUTBOX_HTTP_ADDR", addr);
    relay_env_set(&g.env, "OUTBOX_MAX_ATTEMPTS", "1");
    relay_test_enqueue(conn, 30);
    consume_test_start(&c, &g.env, "metrics-c1", handlers);

    /* Every event claimed for both handlers (the broken one runs after the audit one). */
    body = http_wait_metric(port, "outbox_consumer_claims_total", 60);
    cr_expect_eq(http_metric(body, "outbox_consumer_handler_handled_total{handler=\"audit\"}"), 30,
                 "%s", body);
    cr_expect_eq(http_metric(body, "outbox_consumer_handler_handled_total{handler=\"broken\"}"), 0);
    expect_histogram(body, "outbox_consumer_batch_duration_seconds", 1);
    free(body);
    /* One attempt each: every event of the broken handler is a dead letter, sampled. */
    body = http_wait_metric(port, "outbox_dead_letters{handler=\"broken\"}", 30);
    cr_expect_eq(http_metric(body, "outbox_dead_letters{handler=\"audit\"}"), 0);
    cr_expect_eq(http_metric(body, "outbox_consumer_handler_failed_total{handler=\"broken\"}"), 30,
                 "%s", body);
    expect_promtool_accepts(body, "consumer");
    free(body);
    consume_test_stop(&c, 10000);
    consume_group_fini(&g);
}

/* One dead letter of `handler`, as a service's SQL API call leaves it. */
static void
api_dead_letter(const char *handler)
{
    char sql[512];

    snprintf(sql, sizeof(sql),
             "SELECT outbox.fail(e, '%s', outbox.claim(e, '%s', 30), 'smtp 550', NULL, 1) "
             "FROM gen_random_uuid() AS e",
             handler, handler);
    harness_exec(conn, sql);
}

/*
 * A handler no daemon runs (a service's, through the SQL API) has its dead
 * letters and parked events on the consumer's /metrics, under the same
 * names, so an alert on them sees it; one another live consumer registered
 * is left to that consumer.
 */
Test(metrics, a_consumer_reports_the_gauges_of_handlers_no_daemon_runs)
{
    const char *handlers[] = {CONSUME_EFFECT("audit"), NULL};
    struct consume_group g;
    struct harness_proc c;
    char addr[64], *body;
    int port = http_free_port();

    api_dead_letter("endpoint");
    api_dead_letter("endpoint");
    api_dead_letter("elsewhere");
    harness_exec(conn, "INSERT INTO outbox.handlers (name, subject_filter, consumer_group, "
                       "backend, replica) VALUES ('elsewhere', '>', 'other', 'jetstream', 'r1')");
    consume_group_init(&g, "db", "METRICS", NULL);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    relay_env_set(&g.env, "OUTBOX_HTTP_ADDR", addr);
    consume_test_start(&c, &g.env, "metrics-c2", handlers);

    body = http_wait_metric(port, "outbox_dead_letters{handler=\"endpoint\"}", 2);
    cr_expect_eq(http_metric(body, "outbox_dead_letters{handler=\"endpoint\"}"), 2, "%s", body);
    cr_expect_eq(http_metric(body, "outbox_consumer_parked_events{handler=\"endpoint\"}"), 0, "%s",
                 body);
    cr_expect_eq(http_metric(body, "outbox_dead_letters{handler=\"audit\"}"), 0, "%s", body);
    cr_expect_eq(http_metric(body, "outbox_consumer_handler_handled_total{handler=\"endpoint\"}"),
                 -1, "no counters for a handler this daemon does not run: %s", body);
    cr_expect_eq(http_metric(body, "outbox_dead_letters{handler=\"elsewhere\"}"), -1,
                 "another live consumer's handler is that consumer's to report: %s", body);
    expect_promtool_accepts(body, "consumer");
    free(body);

    /* Requeued, the gauge goes to 0 rather than vanishing. */
    harness_exec(conn, "UPDATE outbox.dead_letters SET requeued_at = now() "
                       "WHERE handler = 'endpoint'");
    for (int i = 0; i < 150; i++) {
        body = http_wait_metric(port, "outbox_dead_letters{handler=\"endpoint\"}", 0);
        if (http_metric(body, "outbox_dead_letters{handler=\"endpoint\"}") == 0) {
            break;
        }
        free(body);
        body = NULL;
        harness_sleep_ms(200);
    }
    cr_expect(body != NULL, "the gauge never read 0 after the requeue");
    free(body);
    consume_test_stop(&c, 10000);
    consume_group_fini(&g);
}
