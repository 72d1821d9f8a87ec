/* SPDX-License-Identifier: MIT */
/*
 * test_relay_chaos.c - FAULTS.md T05, T18 and T11, shortened for CI: while
 * a writer commits events, relays are SIGKILLed and restarted every second
 * or so (T05), nats-server is killed and restarted again and again (T18),
 * and PostgreSQL is stopped with -m immediate and started again (T11).
 * Afterwards the checker compares the stream with the committed ids:
 * nothing lost, nothing phantom, nothing twice in the stream; outages
 * spend no attempt; the relays of T18 and T11 are never restarted by hand.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "chaos.h"
#include "harness.h"
#include "relay_check.h"
#include "relay_test.h"
#include "writer_thread.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { RELAYS = 3 };

static PGconn *conn;

static void
setup(void)
{
    conn = chaos_begin(relay_test_prepare, 0);
}

static void
setup_exclusive(void)
{
    conn = chaos_begin(relay_test_prepare, 1);
}

static void
teardown(void)
{
    chaos_end(&conn);
}

TestSuite(relay_chaos, .init = setup, .fini = teardown, .timeout = 240);
TestSuite(server_chaos, .init = setup_exclusive, .fini = teardown, .timeout = 240);

static void
start_relay(struct harness_proc *p, struct relay_env *env, int index, int generation)
{
    char name[48];

    chaos_replica_name(name, sizeof(name), index, generation);
    relay_test_start(p, env, name);
}

/* Waits for the writer, then for every row to be finished; returns the ms the latter took. */
static long long
settle(struct writer_thread *w, int timeout_ms)
{
    long long started;

    HARNESS_WAIT_UNTIL(atomic_load(&w->done), 120000);
    writer_thread_join(w);
    started = harness_now_ms();
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, timeout_ms);
    return harness_now_ms() - started;
}

static void
expect_no_attempt_spent(void)
{
    cr_assert_eq(harness_scalar_ll(conn, "SELECT coalesce(sum(attempts), 0) FROM outbox.events"), 0,
                 "faults spent attempts");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters"), 0,
                 "faults dead-lettered events");
}

/* CI: ~20 000 events in seconds. Soak (label soak): FAULTS.md's 100 000 over 10 minutes. */
Test(relay_chaos, relays_killed_every_second_lose_nothing_and_store_nothing_twice, .timeout = 1200)
{
    struct harness_proc relays[RELAYS];
    int generation[RELAYS] = {0};
    struct writer_thread w;
    struct relay_env env;
    struct relay_check chk;
    long long last_kill = 0, settled_ms, taken_over;
    int kills = 0;

    relay_test_env(&env, "CHAOS_KILL", "chaoskill");
    relay_env_set(&env, "OUTBOX_BATCH_SIZE", "50");
    for (int i = 0; i < RELAYS; i++) {
        start_relay(&relays[i], &env, i, 0);
    }
    /* Bursts keep the relays busy, so a kill often catches one holding rows. */
    if (chaos_soak()) {
        chaos_start_writer(&w, 100000, 500, 3000);
    } else {
        chaos_start_writer(&w, 20000, 500, 150);
    }
    while (!atomic_load(&w.done)) {
        int victim;

        /* Not waiting for a condition: the kill schedule of T05, shortened. */
        harness_sleep_ms(chaos_random_ms(500, 1500));
        victim = chaos_busy_relay(conn, relays, RELAYS);
        harness_proc_kill(&relays[victim]);
        last_kill = harness_now_ms();
        kills++;
        harness_sleep_ms(chaos_random_ms(0, 200));
        start_relay(&relays[victim], &env, victim, ++generation[victim]);
    }
    settle(&w, 30000);
    settled_ms = harness_now_ms() - last_kill;
    cr_log_info("%d kills; %d events committed; settled %lld ms after the last kill", kills,
                atomic_load(&w.committed), settled_ms);
    /* T05: within lease (2 s) + 10 s of the last kill. */
    cr_assert_leq(settled_ms, 2000 + 10000, "not settled within lease + 10 s of the last kill");
    for (int i = 0; i < RELAYS; i++) {
        relay_test_stop(&relays[i], 10000);
    }
    cr_assert_geq(kills, 5, "too few kills to mean anything");
    taken_over = relay_test_count(conn, "lease_expiries > 0");
    cr_log_info("%lld rows were taken over after their relay was killed", taken_over);
    cr_assert_gt(taken_over, 0, "no kill hit a relay holding rows: the test proved nothing");
    expect_no_attempt_spent();
    chk = relay_test_check(conn, "CHAOS_KILL");
    cr_assert_eq(chk.stream, chk.committed);
    relay_env_fini(&env);
}

Test(server_chaos, nats_killed_and_restarted_again_and_again_loses_nothing_and_spends_no_attempt)
{
    struct harness_proc relays[RELAYS];
    struct writer_thread w;
    struct relay_env env;
    struct relay_check chk;
    long long settle_ms;

    relay_test_env(&env, "CHAOS_NATS", "chaosnats");
    relay_env_set(&env, "OUTBOX_BATCH_SIZE", "100");
    for (int i = 0; i < RELAYS; i++) {
        start_relay(&relays[i], &env, i, 0);
    }
    chaos_start_writer(&w, 10000, 100, 40);
    for (int round = 0; round < 4; round++) {
        /* Not waiting for a condition: the restart schedule of T18, shortened. */
        harness_sleep_ms(chaos_random_ms(1500, 2500));
        harness_nats_kill(SIGKILL);
        harness_sleep_ms(chaos_random_ms(300, 1000));
        harness_nats_start();
    }
    settle_ms = settle(&w, 60000);
    cr_log_info("%d events committed; settled %lld ms after the writer finished",
                atomic_load(&w.committed), settle_ms);
    for (int i = 0; i < RELAYS; i++) {
        relay_test_assert_running(&relays[i], "a relay (restarting NATS must not need it)");
        /* Met an outage: a connection lost and made again, or (a relay slow to start
         * under load, first connecting between kills) a connect refused. */
        cr_assert(harness_proc_log_contains(&relays[i], "nats reconnected") ||
                      harness_proc_log_contains(&relays[i], "broker unavailable"),
                  "relay %d never lost NATS: the restarts missed it", i + 1);
        relay_test_stop(&relays[i], 10000);
    }
    expect_no_attempt_spent();
    chk = relay_test_check(conn, "CHAOS_NATS"); /* the stream survived every restart */
    cr_assert_eq(chk.stream, chk.committed);
    relay_env_fini(&env);
}

Test(server_chaos, postgresql_stopped_immediately_again_and_again_loses_nothing)
{
    struct harness_proc relays[RELAYS];
    struct writer_thread w;
    struct relay_env env;
    struct relay_check chk;
    long long settle_ms;

    relay_test_env(&env, "CHAOS_PG", "chaospg");
    relay_env_set(&env, "OUTBOX_BATCH_SIZE", "100");
    for (int i = 0; i < RELAYS; i++) {
        start_relay(&relays[i], &env, i, 0);
    }
    chaos_start_writer(&w, 10000, 100, 40);
    for (int round = 0; round < 3; round++) {
        /* Not waiting for a condition: the crash schedule of T11, shortened. */
        harness_sleep_ms(chaos_random_ms(1500, 2500));
        harness_pg_stop("immediate");
        harness_sleep_ms(chaos_random_ms(0, 1000));
        harness_pg_start();
    }
    PQfinish(conn);
    conn = PQconnectdb(harness_db_url());
    cr_assert_eq(PQstatus(conn), CONNECTION_OK, "%s", PQerrorMessage(conn));
    settle_ms = settle(&w, 60000);
    cr_log_info("%d events committed, %d writer statements lost to outages; settled %lld ms "
                "after the writer finished",
                atomic_load(&w.committed), atomic_load(&w.failures), settle_ms);
    for (int i = 0; i < RELAYS; i++) {
        relay_test_assert_running(&relays[i], "a relay (restarting PostgreSQL must not need it)");
        cr_assert(harness_proc_log_contains(&relays[i], "database unavailable"),
                  "relay %d never lost PostgreSQL: the restarts missed it", i + 1);
        relay_test_stop(&relays[i], 10000);
    }
    /* Durable iff committed: every commit the writer saw acknowledged survived the crashes. */
    cr_assert_geq(harness_scalar_ll(conn, "SELECT count(*) FROM public.committed"),
                  atomic_load(&w.committed), "acknowledged commits were lost");
    expect_no_attempt_spent();
    chk = relay_test_check(conn, "CHAOS_PG");
    cr_assert_eq(chk.stream, chk.committed);
    relay_env_fini(&env);
}

/*
 * The worst moment of T05: relays that abort right after JetStream acked a
 * batch and before the rows are marked published (the test hook, on each
 * process's third new batch), each restarted at once. Every such batch is leased again after its
 * lease and republished under the same Nats-Msg-Id; the stream must hold each event exactly once,
 * and the republishes must have happened (acked as duplicates, so the rows were taken over after a
 * crash).
 */
#define REPUBLISHED "published again rows the stream already had"

Test(relay_chaos, relays_crashing_between_ack_and_finish_store_every_event_exactly_once)
{
    enum { EVENTS = 1000, LOOPS = 2 };
    struct harness_proc relays[LOOPS];
    int generation[LOOPS] = {0};
    struct relay_env env;
    struct relay_check chk;
    long long started = harness_now_ms(), taken_over;
    int crashes = 0, republishers = 0;

    relay_test_env(&env, "CHAOS_ACKED", "chaosacked");
    relay_env_set(&env, "OUTBOX_BATCH_SIZE", "50");
    relay_env_set(&env, "OUTBOX_LEASE_SECONDS", "1");
    relay_env_set(&env, "OUTBOX_TEST_CRASH_AFTER_PUBLISH", "3");
    /* The crashes are the test's, not the rows': no row may be quarantined for them. */
    relay_env_set(&env, "OUTBOX_MAX_LEASE_EXPIRIES", "1000");
    relay_test_enqueue(conn, EVENTS);
    for (int i = 0; i < LOOPS; i++) {
        start_relay(&relays[i], &env, i, 0);
    }
    while (relay_test_unfinished(conn) > 0) {
        cr_assert_lt(harness_now_ms() - started, 180000, "not settled after %d crashes", crashes);
        for (int i = 0; i < LOOPS; i++) {
            int status = harness_proc_wait(&relays[i], 0);

            if (status == -1) {
                continue;
            }
            cr_assert(
                status == 128 + SIGABRT &&
                    harness_proc_log_contains(&relays[i], "crashing on purpose after publish"),
                "a relay ended with %d, not by the crash hook", status);
            crashes++;
            start_relay(&relays[i], &env, i, ++generation[i]);
        }
        harness_sleep_ms(10);
    }
    for (int i = 0; i < LOOPS; i++) {
        republishers += harness_proc_log_contains(&relays[i], REPUBLISHED);
        if (harness_proc_wait(&relays[i], 0) == -1) {
            relay_test_stop(&relays[i], 10000);
        }
    }
    taken_over = relay_test_count(conn, "lease_expiries > 0");
    cr_log_info("%d crashes after an ack, %lld rows taken over, %d relays republished; settled "
                "in %lld ms",
                crashes, taken_over, republishers, harness_now_ms() - started);
    cr_assert_geq(crashes, 5, "too few crashes to mean anything");
    cr_assert_gt(republishers, 0, "no acked batch was published again: the test proved nothing");
    expect_no_attempt_spent();
    chk = relay_test_check(conn, "CHAOS_ACKED");
    cr_assert_eq(chk.stream, chk.committed, "the stream holds %zu of %zu events", chk.stream,
                 chk.committed);
    relay_env_fini(&env);
}
