/* SPDX-License-Identifier: MIT */
/*
 * test_consume_http_tls.c - the http: handler over https against a real
 * local TLS endpoint (libmicrohttpd, certificates made by openssl,
 * tests/scripts/make_tls_material.sh): with ca_file naming the CA that
 * signed the endpoint's certificate the events are done; with another CA
 * the handshake fails, which is an outage (no attempt spent, nothing
 * dead-lettered), and once the handler trusts the right CA the same
 * events are done.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "consume_test.h"
#include "harness.h"
#include "http_endpoint.h"
#include "relay_test.h"
#include "trust_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;
static char dir[64];
static struct http_endpoint *ep;

static void
setup(void)
{
    consume_test_suite_begin(&conn, dir);
    ep = NULL;
}

static void
teardown(void)
{
    http_endpoint_stop(ep);
    consume_test_suite_end(&conn, dir);
}

TestSuite(consume_http_tls, .init = setup, .fini = teardown, .timeout = 120);

static long long
done_count(void)
{
    return harness_scalar_ll(conn, "SELECT count(*) FROM outbox.processed_events WHERE handler = "
                                   "'hook' AND status = 'done'");
}

/* Starts a consumer whose handler trusts `ca` (a file of the TLS material). */
static void
start(struct harness_proc *p, struct relay_env *env, const char *ca)
{
    char spec[900], ca_path[700];
    const char *const handlers[] = {spec, NULL};

    snprintf(ca_path, sizeof(ca_path), "%s", trust_file(ca));
    snprintf(spec, sizeof(spec), "hook=http[ca_file=%s]:https://127.0.0.1:%d/events", ca_path,
             http_endpoint_port(ep));
    consume_test_env(env, "db", "httptls", "httptls", "httptls");
    relay_env_set(env, "OUTBOX_MAX_ATTEMPTS", "1"); /* a spent attempt would dead-letter */
    consume_test_start(p, env, "tls-1", handlers);
}

Test(consume_http_tls, https_with_the_right_ca_is_done_and_a_wrong_ca_is_an_outage_spending_nothing)
{
    enum { EVENTS = 3 };
    struct harness_proc consumer;
    struct relay_env env;
    char cert[700];

    snprintf(cert, sizeof(cert), "%s", trust_file("server.pem"));
    ep = http_endpoint_start(0, cert, trust_file("server-key.pem"));
    cr_assert_not_null(ep, "the TLS endpoint did not start");
    relay_test_enqueue(conn, EVENTS);

    start(&consumer, &env, "other-ca.pem");
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&consumer, "cannot reach its endpoint"), 20000);
    consume_test_stop(&consumer, 10000);
    relay_env_fini(&env);
    cr_assert_eq(done_count(), 0, "an endpoint no trusted CA signed was sent events");
    cr_assert_eq(http_endpoint_count(ep), 0);
    consume_test_expect_nothing_spent(conn);

    start(&consumer, &env, "ca.pem");
    HARNESS_WAIT_UNTIL(done_count() == EVENTS, 30000);
    consume_test_stop(&consumer, 10000);
    relay_env_fini(&env);
    cr_assert_eq(http_endpoint_count(ep), EVENTS);
    consume_test_expect_nothing_spent(conn);
}
