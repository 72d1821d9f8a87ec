/* SPDX-License-Identifier: MIT */
/*
 * test_db_blackhole.c - FAULTS.md T13, shortened for CI: a relay and a
 * consumer reach PostgreSQL through a socat proxy whose port is black-holed
 * for 32 s by iptables DROP rules on loopback (no RST, no FIN, packets just
 * vanish), while a second relay, connected directly, and a writer carry on.
 *
 * Not a SIGSTOPped proxy, as FAULTS.md suggests: the kernel still ACKs
 * data and keepalive probes for a stopped process's sockets, so the
 * connection is alive at the TCP level and neither keepalives nor
 * tcp_user_timeout can see anything wrong (docs/guarantees.md, Faults: a frozen peer).
 * The test skips, saying why, where iptables cannot be used.
 *
 * Pass: each cut-off daemon notices within 30 s (libpq keepalives and
 * tcp_user_timeout in the conninfo defaults); no thread of theirs stays
 * blocked past 35 s (their /healthz answers throughout, both notice before
 * 30 s, and both stop on SIGTERM within 35 s); the rows the cut-off relay
 * had leased are taken over by the other relay once their lease ends; and
 * after the hole closes the cut-off relay works again and nothing is
 * lost or handled twice.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "chaos.h"
#include "conservation.h"
#include "consume_test.h"
#include "harness.h"
#include "http_get.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;
static int blackholed_port; /* its DROP rules are in place; teardown removes them */

/* Adds (-I) or deletes (-D) DROP rules for loopback packets to and from `port`; 0 if it worked. */
static int
iptables_drop(const char *verb, int port)
{
    static const char *const dirs[] = {"--dport", "--sport"};
    int failed = 0;

    for (int i = 0; i < 2; i++) {
        char port_text[16];
        char *argv[] = {"iptables",      "-w",      (char *)verb, "INPUT", "-i", "lo", "-p", "tcp",
                        (char *)dirs[i], port_text, "-j",         "DROP",  NULL};
        struct harness_proc p;

        snprintf(port_text, sizeof(port_text), "%d", port);
        harness_spawn(&p, argv, NULL);
        failed |= harness_proc_wait(&p, 10000) != 0;
    }
    return failed ? -1 : 0;
}

static void
setup(void)
{
    conn = chaos_begin(consume_test_prepare, 0);
}

static void
teardown(void)
{
    if (blackholed_port != 0) {
        iptables_drop("-D", blackholed_port);
        blackholed_port = 0;
    }
    chaos_end(&conn);
}

TestSuite(db_blackhole, .init = setup, .fini = teardown, .timeout = 240);

enum { BLACKHOLE_MS = 32000, DETECT_MS = 30000, BLOCKED_MS = 35000, LEASE_MS = 2000 };

#define DOWN "database unavailable"

static const char *const handler_names[] = {"audit", NULL};
static const char *const handlers[] = {CONSUME_EFFECT("audit"), NULL};

static int
http_port_of(struct relay_env *env)
{
    char addr[32];
    int port = http_free_port();

    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    relay_env_set(env, "OUTBOX_HTTP_ADDR", addr);
    return port;
}

static size_t
log_count(const struct harness_proc *p, const char *needle)
{
    char *log = harness_proc_log(p);
    size_t n = text_count(log, needle);

    free(log);
    return n;
}

static void
expect_health_answers(int port, const char *who)
{
    char *body = NULL;
    int st = http_get(port, "/healthz", &body);

    free(body);
    cr_assert_neq(st, 0, "%s's /healthz did not answer during the black hole", who);
}

Test(db_blackhole, t13_workers_notice_a_black_holed_database_within_30_s_and_lose_nothing)
{
    struct harness_proxy px;
    struct harness_proc cut_relay, direct_relay, cut_consumer;
    struct relay_env cut_env, direct_env, consumer_env;
    struct writer_thread w;
    char *via;
    int relay_http, consumer_http;
    long long holed_at, relay_noticed = -1, consumer_noticed = -1, leased_at_hole;
    long long reclaimed_at = -1, worst_health_ms = 0;
    size_t batches_at_resume;

    harness_proxy_start(&px, harness_pg_port());
    via = harness_db_url_via(px.port);
    relay_test_env(&cut_env, "T13", "t13");
    relay_env_set(&cut_env, "OUTBOX_DATABASE_URL", via);
    relay_env_set(&cut_env, "OUTBOX_BATCH_SIZE", "50");
    relay_http = http_port_of(&cut_env);
    relay_test_env(&direct_env, "T13", "t13");
    relay_env_set(&direct_env, "OUTBOX_BATCH_SIZE", "50");
    consume_test_env(&consumer_env, "jetstream", "T13", "t13", "G_T13");
    relay_env_set(&consumer_env, "OUTBOX_DATABASE_URL", via);
    consumer_http = http_port_of(&consumer_env);
    relay_test_start(&cut_relay, &cut_env, "cut-relay");
    relay_test_start(&direct_relay, &direct_env, "direct-relay");
    consume_test_start(&cut_consumer, &consumer_env, "cut-consumer", handlers);
    chaos_start_writer(&w, 6000, 20, 50);
    /* Both cut-off daemons at work, so the black hole catches them mid-stride. */
    HARNESS_WAIT_UNTIL(
        log_count(&cut_relay, "lease batch") > 0 && consume_test_handled(conn, "audit") > 0, 30000);
    if (iptables_drop("-I", px.port) != 0) {
        iptables_drop("-D", px.port);
        cr_skip_test("iptables cannot add a DROP rule here (not root, or no netfilter): no way "
                     "to black-hole a connection without a RST");
    }
    blackholed_port = px.port;
    holed_at = harness_now_ms();
    harness_exec(conn, "CREATE TABLE public.leased_at_hole AS SELECT id FROM outbox.events "
                       "WHERE status = 'leased'");
    leased_at_hole = harness_scalar_ll(conn, "SELECT count(*) FROM public.leased_at_hole");
    while (harness_now_ms() - holed_at < BLACKHOLE_MS) {
        long long t = harness_now_ms(), health_ms;

        if (relay_noticed < 0 && harness_proc_log_contains(&cut_relay, DOWN)) {
            relay_noticed = t - holed_at;
        }
        if (consumer_noticed < 0 && harness_proc_log_contains(&cut_consumer, DOWN)) {
            consumer_noticed = t - holed_at;
        }
        if (reclaimed_at < 0 &&
            harness_scalar_ll(conn, "SELECT count(*) FROM public.leased_at_hole p JOIN "
                                    "outbox.events e USING (id) WHERE e.status <> 'done'") == 0) {
            reclaimed_at = t - holed_at;
        }
        /* The daemons' HTTP threads answer all along: no process is frozen whole. */
        expect_health_answers(relay_http, "the cut-off relay");
        expect_health_answers(consumer_http, "the cut-off consumer");
        health_ms = harness_now_ms() - t;
        worst_health_ms = health_ms > worst_health_ms ? health_ms : worst_health_ms;
        harness_sleep_ms(100);
    }
    batches_at_resume = log_count(&cut_relay, "lease batch");
    cr_assert_eq(iptables_drop("-D", px.port), 0, "removing the DROP rules");
    blackholed_port = 0;
    cr_log_info(
        "T13: black hole %d ms; %lld rows leased when the hole opened; the cut-off relay noticed "
        "after %lld ms, the consumer after %lld ms; the leased rows were all done %lld ms "
        "after the hole opened; /healthz of both took at most %lld ms",
        BLACKHOLE_MS, leased_at_hole, relay_noticed, consumer_noticed, reclaimed_at,
        worst_health_ms);
    cr_assert(consumer_noticed >= 0 && consumer_noticed <= DETECT_MS,
              "the consumer did not notice the black hole within %d ms (%lld); its log ends:\n%s",
              DETECT_MS, consumer_noticed, consume_test_log_tail(&cut_consumer, 2500));
    cr_assert(relay_noticed >= 0 && relay_noticed <= DETECT_MS,
              "the relay did not notice the black hole within %d ms (%lld); its log ends:\n%s",
              DETECT_MS, relay_noticed, consume_test_log_tail(&cut_relay, 2500));
    cr_assert(consumer_noticed >= 0 && consumer_noticed <= DETECT_MS,
              "the consumer did not notice the black hole within %d ms (%lld); its log ends:\n%s",
              DETECT_MS, consumer_noticed, consume_test_log_tail(&cut_consumer, 2500));
    cr_assert(reclaimed_at >= 0 && reclaimed_at <= LEASE_MS + 10000,
              "rows leased by the cut-off relay were not taken over after their lease (%lld ms)",
              reclaimed_at);
    HARNESS_WAIT_UNTIL(atomic_load(&w.done), 120000);
    writer_thread_join(&w);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0 &&
                           consume_test_handled(conn, "audit") ==
                               harness_scalar_ll(conn, "SELECT count(*) FROM public.committed") &&
                           consume_test_nats_drained("T13", "G_T13"),
                       60000);
    /* Back on its feet: it found the database again on its own and leased rows again. */
    HARNESS_WAIT_UNTIL(log_count(&cut_relay, "lease batch") > batches_at_resume ||
                           relay_test_unfinished(conn) == 0,
                       30000);
    consume_test_assert_running(&cut_consumer, "the cut-off consumer");
    relay_test_assert_running(&cut_relay, "the cut-off relay");
    consume_test_stop(&cut_consumer, BLOCKED_MS);
    relay_test_stop(&cut_relay, BLOCKED_MS);
    relay_test_stop(&direct_relay, 10000);
    harness_proxy_stop(&px);
    harness_exec(conn, "DROP TABLE public.leased_at_hole");
    conservation_expect_zero(conn, "T13", handler_names);
    consume_test_expect_nothing_spent(conn);
    free(via);
    relay_env_fini(&consumer_env);
    relay_env_fini(&direct_env);
    relay_env_fini(&cut_env);
}
