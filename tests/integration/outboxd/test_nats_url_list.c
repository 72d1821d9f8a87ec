/* SPDX-License-Identifier: MIT */
/*
 * test_nats_url_list.c - OUTBOX_NATS_URL as a list of servers, the first of
 * them down (a port nothing listens on), the run's server second: every
 * program that connects to NATS still connects - the relay and consumer
 * daemons, outboxctl (doctor, audit), the demo (with its stream audit) and
 * the benchmark - and a bad entry is refused at start, naming nats_url and
 * the entry. (nats.c 3.4.1 given a list through natsOptions_SetURL never
 * connects at all: FACTS 20.)
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "consume_test.h"
#include "ctl_test.h"
#include "harness.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;
static char list[256];

/* A loopback port nothing listens on: bound by us, then closed. */
static int
dead_port(void)
{
    struct sockaddr_in addr = {.sin_family = AF_INET};
    socklen_t len = sizeof(addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 &&
              getsockname(fd, (struct sockaddr *)&addr, &len) == 0);
    close(fd);
    return ntohs(addr.sin_port);
}

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    consume_test_prepare(conn);
    snprintf(list, sizeof(list), "nats://127.0.0.1:%d,%s", dead_port(), harness_nats_url());
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(nats_url_list, .init = setup, .fini = teardown, .timeout = 240);

static void
list_env(struct relay_env *env, const char *stream, const char *prefix)
{
    relay_test_env(env, stream, prefix);
    relay_env_set(env, "OUTBOX_NATS_URL", list);
}

Test(nats_url_list, relay_and_consumer_daemons_connect_past_a_dead_first_server)
{
    static const char *const handlers[] = {CONSUME_EFFECT("effect"), NULL};
    struct relay_env renv, cenv;
    struct harness_proc relay, consumer;
    struct relay_check chk;

    list_env(&renv, "URL_DAEMONS", "urldaemons");
    consume_test_env(&cenv, "jetstream", "URL_DAEMONS", "urldaemons", "G_URL");
    relay_env_set(&cenv, "OUTBOX_NATS_URL", list);
    relay_test_start(&relay, &renv, "relay-list");
    consume_test_start(&consumer, &cenv, "consumer-list", handlers);
    relay_test_enqueue(conn, 200);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "effect") == 200, 30000);
    consume_test_expect_exactly_once(conn, "effect");
    chk = relay_test_check(conn, "URL_DAEMONS");
    cr_assert_eq(chk.stream, 200);
    cr_assert(harness_proc_log_contains(&relay, "stream ready"), "the relay never got the stream");
    consume_test_stop(&consumer, 10000);
    relay_test_stop(&relay, 10000);
    relay_env_fini(&cenv);
    relay_env_fini(&renv);
}

Test(nats_url_list, outboxctl_doctor_and_audit_connect_past_a_dead_first_server)
{
    struct relay_env env;
    struct harness_proc relay;
    struct ctl_run r;

    list_env(&env, "URL_CTL", "urlctl");
    relay_test_start(&relay, &env, "relay-ctl");
    relay_test_enqueue(conn, 50);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    relay_test_stop(&relay, 10000);

    ctl_run(&r, &env, (const char *const[]){"doctor", "--json", NULL});
    cr_assert(strstr(r.out, "\"check\":\"nats\"") == NULL && strstr(r.out, "nats_version") != NULL,
              "doctor did not reach NATS through the list:\n%s", r.out);
    cr_assert(strstr(r.out, "cannot reach nats") == NULL, "%s", r.out);
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 0, (const char *const[]){"audit", NULL});
    ctl_run_fini(&r);
    relay_env_fini(&env);
}

Test(nats_url_list, the_demo_and_its_stream_audit_connect_past_a_dead_first_server)
{
    char *argv[] = {(char *)harness_bin("outboxd"),
                    "demo",
                    "--seconds",
                    "2",
                    "--rate",
                    "50",
                    "--writers",
                    "1",
                    "--relays",
                    "1",
                    NULL};
    struct relay_env env;
    struct harness_proc p;
    char *out;

    list_env(&env, "URL_DEMO", "urldemo");
    relay_env_set(&env, "OUTBOX_SCHEMA", "demo_urls");
    harness_spawn(&p, argv, env.vars);
    cr_assert_eq(harness_proc_wait(&p, 180000), 0, "outboxd demo failed:\n%s",
                 harness_proc_log(&p));
    out = harness_proc_log(&p);
    cr_assert(strstr(out, "duplicates in the stream") != NULL, "no audit in:\n%s", out);
    cr_assert(strstr(out, "throwaway") == NULL, "the demo started its own servers:\n%s", out);
    free(out);
    relay_env_fini(&env);
}

static void
bench_with_list(const char *kind)
{
    char *argv[] = {(char *)harness_bin("outbox-bench"),
                    (char *)kind,
                    "--events",
                    "300",
                    "--seconds",
                    "1",
                    "--sustain-seconds",
                    "1",
                    "--batch",
                    "100",
                    NULL};
    struct relay_env env;
    struct harness_proc p;
    char *out;

    list_env(&env, "URL_BENCH", "urlbench");
    harness_spawn(&p, argv, env.vars);
    cr_assert_eq(harness_proc_wait(&p, 200000), 0, "outbox-bench %s failed:\n%s", kind,
                 harness_proc_log(&p));
    out = harness_proc_log(&p);
    cr_assert(strstr(out, "cannot") == NULL, "%s", out);
    cr_log_info("%s", out);
    free(out);
    relay_env_fini(&env);
}

/* relay: stream setup, raw publishing, latency subscription; consume: raw fetches. */
Test(nats_url_list, the_benchmark_connects_past_a_dead_first_server)
{
    bench_with_list("relay");
    bench_with_list("consume");
}

Test(nats_url_list, a_bad_entry_is_refused_at_start_naming_the_field_and_the_entry)
{
    const char *bad = "nats://127.0.0.1:4222,nats://relay:" RELAY_TEST_SECRET "@127.0.0.1:70000";
    char *argv[] = {(char *)harness_bin("outboxd"), "relay", NULL};
    struct relay_env env;
    struct harness_proc p;
    struct ctl_run r;
    char *out;

    relay_test_env(&env, "URL_BAD", "urlbad");
    relay_env_set(&env, "OUTBOX_NATS_URL", bad);
    harness_spawn(&p, argv, env.vars);
    cr_assert_neq(harness_proc_wait(&p, 30000), 0, "the relay started with a bad nats_url");
    out = harness_proc_log(&p);
    cr_assert(strstr(out, "nats_url") != NULL && strstr(out, "nats://***@127.0.0.1:70000") != NULL,
              "the refusal names neither the field nor the entry:\n%s", out);
    cr_assert(strstr(out, RELAY_TEST_SECRET) == NULL, "the refusal printed the password:\n%s", out);
    free(out);
    ctl_run(&r, &env, (const char *const[]){"doctor", NULL});
    cr_assert_neq(r.status, 0);
    cr_assert(strstr(r.out, "nats_url") != NULL && strstr(r.out, RELAY_TEST_SECRET) == NULL, "%s",
              r.out);
    ctl_run_fini(&r);
    relay_env_fini(&env);
}
