/* SPDX-License-Identifier: MIT */
/*
 * test_relay_broker_faults.c - the broker is there but cannot store, or is
 * gone for long, shortened for CI.
 *
 * FAULTS.md T22 (a): nats-server restarted without JetStream for a while
 * (publishes meet no responders); (b) the relays' stream deleted under
 * them and another stream created on the same subjects, then removed, so
 * the relays make their stream again. Pass: 0 attempts, 0 quarantines, a
 * full drain after recovery, and no row finished on a PubAck from another
 * stream (ExpectStream: the wrong stream stores nothing, the rows stay
 * pending while it exists).
 *
 * FAULTS.md T19: nats-server down for a long while (CI: 30 s) as writers
 * keep committing. Pass: 0 attempts, 0 dead letters, relay RSS flat (no
 * per-row buffering), at most one connect attempt per second per relay
 * (counted at a proxy in front of NATS), and afterwards the backlog drains
 * at >= 2x the production rate. The soak form (label soak) holds the
 * outage for 5 minutes.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "chaos.h"
#include "conservation.h"
#include "devserver/devserver_probe.h"
#include "harness.h"
#include "relay_check.h"
#include "relay_test.h"
#include "stream_admin_nats.h"
#include "stream_reader_nats.h"
#include "writer_thread.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { RELAYS = 3 };

static PGconn *conn;

static void
setup(void)
{
    conn = chaos_begin(relay_test_prepare, 1); /* these tests stop nats-server */
}

static void
teardown(void)
{
    chaos_end(&conn);
}

TestSuite(broker_faults, .init = setup, .fini = teardown, .timeout = 300);

static void
start_relays(struct harness_proc *relays, struct relay_env *env)
{
    for (int i = 0; i < RELAYS; i++) {
        char name[32];

        snprintf(name, sizeof(name), "relay-%d", i + 1);
        relay_test_start(&relays[i], env, name);
    }
}

static void
stop_relays(struct harness_proc *relays, const char *what)
{
    for (int i = 0; i < RELAYS; i++) {
        relay_test_assert_running(&relays[i], what);
        relay_test_stop(&relays[i], 10000);
    }
}

static void
expect_nothing_spent(void)
{
    cr_assert_eq(harness_scalar_ll(conn, "SELECT coalesce(sum(attempts), 0) FROM outbox.events"), 0,
                 "the fault spent attempts");
    cr_assert_eq(relay_test_count(conn, "status IN ('dead', 'invalid')"), 0,
                 "the fault quarantined or dead-lettered rows");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters"), 0,
                 "the fault dead-lettered events");
}

/* ---- T22 (a) --------------------------------------------------------------------------- */

Test(broker_faults, t22a_nats_without_jetstream_spends_nothing_and_everything_drains_after)
{
    struct harness_proc relays[RELAYS], core = {0};
    struct relay_env env;
    char port[16];
    char *argv[] = {"nats-server", "-a", "127.0.0.1", "-p", port, NULL};
    long long pending_during;

    relay_test_env(&env, "T22A", "t22a");
    start_relays(relays, &env);
    relay_test_enqueue(conn, 500);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);

    /* The same port, no -js: connections succeed, every publish meets no responders. */
    harness_nats_kill(SIGTERM);
    snprintf(port, sizeof(port), "%d", harness_nats_port());
    harness_spawn(&core, argv, NULL);
    HARNESS_WAIT_UNTIL(obx_dev_tcp_connects(harness_nats_port()), 10000);
    relay_test_enqueue(conn, 1000);
    /* Not waiting for a condition: the outage lasts this long whatever the relays do. */
    harness_sleep_ms(6000);
    pending_during = relay_test_count(conn, "status IN ('pending', 'leased')");
    cr_log_info("T22a: %lld of 1000 rows unfinished after 6 s without JetStream", pending_during);
    cr_assert_eq(pending_during, 1000, "rows finished while no stream could store them");
    expect_nothing_spent();
    harness_proc_stop(&core, 10000);
    harness_nats_start();
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    stop_relays(relays, "a relay (JetStream going away must not need it)");
    expect_nothing_spent();
    conservation_expect_zero(conn, "T22A", NULL);
    relay_env_fini(&env);
}

/* ---- T22 (b) --------------------------------------------------------------------------- */

Test(broker_faults, t22b_stream_deleted_and_a_wrong_stream_in_its_place_finishes_nothing)
{
    struct harness_proc relays[RELAYS];
    struct relay_env env;
    struct relay_check chk;
    char err[512] = "";
    long long pending_during;
    int64_t wrong_msgs;
    size_t remade = 0, ready_before[RELAYS];

    relay_test_env(&env, "T22B", "t22b");
    start_relays(relays, &env);
    relay_test_enqueue(conn, 500);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    /*
     * What the deleted stream held is T23's replay path, out of scope here:
     * the checker below counts the events committed after the deletion.
     */
    harness_exec(conn, "DELETE FROM public.committed");
    /*
     * Each relay's "stream ready" lines so far. A relay's first one is not
     * always in by now (a check that fails at start is tried again after a
     * pause, and that can fall after the deletion, where it makes the
     * stream), so the remakes are the lines logged from here on, not each
     * relay's lines but one.
     */
    for (int i = 0; i < RELAYS; i++) {
        char *log = harness_proc_log(&relays[i]);

        ready_before[i] = text_count(log, "stream ready");
        free(log);
    }
    cr_assert_eq(stream_admin_delete(harness_nats_url(), "T22B", err, sizeof(err)), 0, "%s", err);
    /*
     * A relay that meets the missing stream makes it again, and may do so
     * before the wrong one is in (its subjects then overlap: 10065): delete
     * the remade one and try again, so the wrong stream is what they meet.
     */
    for (int tries = 0;
         stream_admin_create(harness_nats_url(), "T22B_WRONG", "t22b.>", err, sizeof(err)) != 0;
         tries++) {
        cr_assert_lt(tries, 20, "%s", err);
        stream_admin_delete(harness_nats_url(), "T22B", err, sizeof(err));
    }
    relay_test_enqueue(conn, 1000);
    /* Not waiting for a condition: the wrong stream stays this long whatever the relays do. */
    harness_sleep_ms(5000);
    pending_during = relay_test_count(conn, "status IN ('pending', 'leased')");
    wrong_msgs = stream_message_count(harness_nats_url(), "T22B_WRONG", err, sizeof(err));
    cr_log_info("T22b: with the wrong stream in place for 5 s: %lld of 1000 rows unfinished, "
                "%lld messages in the wrong stream",
                pending_during, (long long)wrong_msgs);
    cr_assert_eq(pending_during, 1000, "rows finished on a PubAck from another stream");
    cr_assert_eq(wrong_msgs, 0, "the wrong stream stored messages (ExpectStream not set?)");
    expect_nothing_spent();
    cr_assert_eq(stream_admin_delete(harness_nats_url(), "T22B_WRONG", err, sizeof(err)), 0, "%s",
                 err);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    for (int i = 0; i < RELAYS; i++) {
        char *log = harness_proc_log(&relays[i]);

        remade += text_count(log, "stream ready") - ready_before[i];
        free(log);
    }
    stop_relays(relays, "a relay (a deleted stream must not need it)");
    expect_nothing_spent();
    cr_assert_gt(remade, 0, "no relay made its stream again");
    chk = relay_test_check(conn, "T22B");
    cr_assert_eq(chk.committed, 1000);
    cr_assert_eq(chk.stream, 1000, "the remade stream holds %zu of the 1000 new events",
                 chk.stream);
    relay_env_fini(&env);
}

/* ---- T19 ------------------------------------------------------------------------------- */

/* Resident set of `pid` in KiB, from /proc. */
static long
rss_kib(pid_t pid)
{
    char path[64], line[256];
    long kib = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "VmRSS: %ld", &kib) == 1) {
            break;
        }
    }
    fclose(f);
    return kib;
}

static void
long_broker_outage(int outage_s)
{
    enum { RATE = 200 }; /* events per second, as FAULTS.md T19 */
    struct harness_proc relays[RELAYS];
    struct harness_proxy px;
    struct writer_thread w;
    struct relay_env env;
    long rss_before[RELAYS], rss_max[RELAYS] = {0};
    char nats_url[128];
    int conns_before, conns_outage, produced_before;
    long long outage_started, outage_ms, drain_started, drain_ms, backlog;
    double production_rate, drain_rate;

    harness_proxy_start(&px, harness_nats_port());
    snprintf(nats_url, sizeof(nats_url), "nats://relay:" RELAY_TEST_SECRET "@127.0.0.1:%d",
             px.port);
    relay_test_env(&env, "T19", "t19");
    relay_env_set(&env, "OUTBOX_NATS_URL", nats_url);
    relay_env_set(&env, "OUTBOX_BATCH_SIZE", "100");
    start_relays(relays, &env);
    /* 10 events every 50 ms: ~200/s, through the outage and the drain after it. */
    chaos_start_writer(&w, RATE * (outage_s + 12), 10, 50);
    /* Not waiting for a condition: warm-up at the production rate. */
    harness_sleep_ms(5000);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) < RATE, 10000);
    for (int i = 0; i < RELAYS; i++) {
        rss_before[i] = rss_kib(relays[i].pid);
    }
    conns_before = harness_proxy_connections(&px);
    produced_before = atomic_load(&w.committed);
    harness_nats_kill(SIGKILL);
    outage_started = harness_now_ms();
    while (harness_now_ms() - outage_started < (long long)outage_s * 1000) {
        /* Not waiting for a condition: sampling memory once a second through the outage. */
        harness_sleep_ms(1000);
        for (int i = 0; i < RELAYS; i++) {
            long r = rss_kib(relays[i].pid);

            rss_max[i] = r > rss_max[i] ? r : rss_max[i];
        }
    }
    outage_ms = harness_now_ms() - outage_started;
    conns_outage = harness_proxy_connections(&px) - conns_before;
    production_rate = (atomic_load(&w.committed) - produced_before) * 1000.0 / (double)outage_ms;
    expect_nothing_spent();
    backlog = relay_test_unfinished(conn);
    harness_nats_start();
    drain_started = harness_now_ms();
    {
        int produced_at_restart = atomic_load(&w.committed);

        HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 120000);
        drain_ms = harness_now_ms() - drain_started;
        drain_rate = (double)(backlog + (atomic_load(&w.committed) - produced_at_restart)) *
                     1000.0 / (double)(drain_ms > 0 ? drain_ms : 1);
    }
    cr_log_info("T19: outage %lld ms, backlog %lld rows, production %.0f events/s; %d connect "
                "attempts by %d relays (%.2f per relay per second); drained in %lld ms at %.0f "
                "events/s (%.1fx production)",
                outage_ms, backlog, production_rate, conns_outage, RELAYS,
                conns_outage / (RELAYS * outage_ms / 1000.0), drain_ms, drain_rate,
                drain_rate / production_rate);
    for (int i = 0; i < RELAYS; i++) {
        cr_log_info("T19: relay %d RSS %ld KiB before, at most %ld KiB during the outage", i + 1,
                    rss_before[i], rss_max[i]);
        /* Per-row buffering of the backlog (thousands of envelopes) would show up here. */
        cr_assert_leq(rss_max[i] - rss_before[i], 8 * 1024,
                      "relay %d grew %ld KiB during the outage", i + 1, rss_max[i] - rss_before[i]);
    }
    cr_assert_gt(conns_outage, 0, "no relay tried to reconnect: the proxy saw nothing");
    cr_assert_leq(conns_outage, RELAYS * (outage_ms / 1000 + 1),
                  "%d connect attempts in %lld ms by %d relays: more than one a second each",
                  conns_outage, outage_ms, RELAYS);
    cr_assert_geq(drain_rate, 2 * production_rate,
                  "the backlog drained at %.0f events/s, less "
                  "than twice the production rate %.0f",
                  drain_rate, production_rate);
    /* The drain is measured: the writer's events past it would only be waited for. */
    writer_thread_stop(&w);
    HARNESS_WAIT_UNTIL(atomic_load(&w.done), 120000);
    writer_thread_join(&w);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    stop_relays(relays, "a relay (a long outage must not need it)");
    harness_proxy_stop(&px);
    expect_nothing_spent();
    conservation_expect_zero(conn, "T19", NULL);
    relay_env_fini(&env);
}

/* CI: 30 s. Soak (ctest label soak sets OUTBOX_TEST_SOAK=1): 5 minutes, 60 000 rows behind. */
Test(broker_faults, t19_long_broker_outage_spends_nothing_buffers_nothing_and_drains_fast,
     .timeout = 1200)
{
    long_broker_outage(chaos_soak() ? 300 : 30);
}
