/* SPDX-License-Identifier: MIT */
/*
 * test_consumer_chaos.c - consumers under repeated crashes, shortened for
 * CI, on both backends. FAULTS.md T07: a loop of short-lived consumers
 * that each abort right after a batch's ledger commit, before its acks
 * (OUTBOX_TEST_CRASH_AFTER_LEDGER_COMMIT=1). Consumers SIGKILLed again and
 * again while a writer commits and relays publish. PostgreSQL stopped
 * with -m immediate and started again under writer, relay and consumers.
 * FAULTS.md T12: random backends of writer, relay and consumers terminated
 * (pg_terminate_backend) again and again. Each time: every committed event handled, no handler's
 * effect twice, no attempt spent, no consumer restarted except the ones killed.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "chaos.h"
#include "consume_test.h"
#include "harness.h"
#include "relay_test.h"
#include "writer_thread.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { REPLICAS = 3 };

static PGconn *conn;

static void
setup(void)
{
    conn = chaos_begin(consume_test_prepare, 0);
}

static void
setup_exclusive(void)
{
    conn = chaos_begin(consume_test_prepare, 1);
}

static void
teardown(void)
{
    chaos_end(&conn);
}

TestSuite(consumer_chaos, .init = setup, .fini = teardown, .timeout = 240);
TestSuite(consumer_server_chaos, .init = setup_exclusive, .fini = teardown, .timeout = 240);

static const char *const handlers[] = {CONSUME_EFFECT("audit"), CONSUME_EFFECT("mailer"), NULL};

static void
start_replica(struct harness_proc *p, struct consume_group *g, int index, int generation)
{
    char name[48];

    chaos_replica_name(name, sizeof(name), index, generation);
    consume_test_start(p, &g->env, name, handlers);
}

static int
all_handled(long long events)
{
    return consume_test_handled(conn, "audit") == events &&
           consume_test_handled(conn, "mailer") == events;
}

/* Every event handled and, on the feed's side, settled; events < 0: every committed one. */
static int
settled(const struct consume_group *g, long long events)
{
    if (events < 0) {
        events = harness_scalar_ll(conn, "SELECT count(*) FROM public.committed");
    }
    if (!all_handled(events)) {
        return 0;
    }
    return g->jetstream ? consume_test_nats_drained(g->stream, g->consumer)
                        : relay_test_unfinished(conn) == 0;
}

static void
expect_each_handler_once(void)
{
    consume_test_expect_exactly_once(conn, "audit");
    consume_test_expect_exactly_once(conn, "mailer");
    consume_test_expect_nothing_spent(conn);
}

/* Deliveries beyond the first of each event, as the feed's own books say. */
static long long
redeliveries(const struct consume_group *g, long long events)
{
    if (g->jetstream) {
        struct consume_nats_state st = consume_test_nats_state(g->stream, g->consumer);

        return (long long)st.delivered_consumer_seq - events;
    }
    return harness_scalar_ll(conn, "SELECT coalesce(sum(lease_expiries), 0) FROM outbox.events");
}

/* ---- FAULTS.md T07 ---------------------------------------------------------------------- */

/*
 * Two replicas that abort after every ledger commit that handled something,
 * each restarted as soon as it is gone, until every event is handled and
 * settled. Their unacked batches come back (ack wait, or the DB lease) to
 * replicas that must find them done and run nothing twice.
 */
static void
crash_after_ledger_commit(const char *bus)
{
    enum { EVENTS = 1000, LOOPS = 2 };
    struct harness_proc replicas[LOOPS];
    int generation[LOOPS] = {0};
    struct consume_group g;
    int crashes = 0;
    long long started = harness_now_ms(), again;

    consume_group_init(&g, bus, "T07", NULL);
    relay_env_set(&g.env, "OUTBOX_TEST_CRASH_AFTER_LEDGER_COMMIT", "1");
    relay_env_set(&g.env, "OUTBOX_LEASE_SECONDS", "1");
    relay_test_enqueue(conn, EVENTS);
    for (int i = 0; i < LOOPS; i++) {
        start_replica(&replicas[i], &g, i, 0);
    }
    while (!settled(&g, EVENTS)) {
        cr_assert_lt(harness_now_ms() - started, 120000, "not settled after %d crashes", crashes);
        for (int i = 0; i < LOOPS; i++) {
            int status = harness_proc_wait(&replicas[i], 0);

            if (status == -1) {
                continue;
            }
            cr_assert(status == 128 + SIGABRT &&
                          harness_proc_log_contains(&replicas[i], "crashing on purpose"),
                      "a replica ended with %d, not by the crash hook:\n%s", status,
                      consume_test_log_tail(&replicas[i], 3000));
            crashes++;
            start_replica(&replicas[i], &g, i, ++generation[i]);
        }
        harness_sleep_ms(10);
    }
    for (int i = 0; i < LOOPS; i++) {
        /* One may have crashed on its last batch just now: it ends as it should either way. */
        if (harness_proc_wait(&replicas[i], 0) == -1) {
            consume_test_stop(&replicas[i], 10000);
        }
    }
    again = redeliveries(&g, EVENTS);
    cr_log_info("%s: %d crashes after a ledger commit, %lld redeliveries, settled in %lld ms", bus,
                crashes, again, harness_now_ms() - started);
    cr_assert_geq(crashes, 5, "too few crashes to mean anything");
    cr_assert_gt(again, 0, "no batch came back after a crash: the test proved nothing");
    expect_each_handler_once();
    consume_group_fini(&g);
}

Test(consumer_chaos,
     consumers_crashing_between_ledger_commit_and_ack_run_nothing_twice_on_jetstream)
{
    crash_after_ledger_commit("jetstream");
}

Test(consumer_chaos, consumers_crashing_between_ledger_commit_and_ack_run_nothing_twice_on_the_db)
{
    crash_after_ledger_commit("db");
}

/* ---- kill -9 while writers and relays run ------------------------------------------------ */

static void
consumers_killed_while_writers_run(const char *bus)
{
    enum { EVENTS = 4000 };
    struct harness_proc replicas[REPLICAS];
    int generation[REPLICAS] = {0};
    struct consume_group g;
    struct writer_thread w;
    int kills = 0;
    long long started;

    consume_group_init(&g, bus, "KILL", NULL);
    relay_env_set(&g.env, "OUTBOX_BATCH_SIZE", "50");
    for (int i = 0; i < REPLICAS; i++) {
        start_replica(&replicas[i], &g, i, 0);
    }
    chaos_start_writer(&w, EVENTS, 40, 50);
    while (!atomic_load(&w.done)) {
        int victim = chaos_random_ms(0, REPLICAS - 1);

        /* Not waiting for a condition: the kill schedule, like T05's for relays. */
        harness_sleep_ms(chaos_random_ms(200, 700));
        harness_proc_kill(&replicas[victim]);
        kills++;
        harness_sleep_ms(chaos_random_ms(0, 200));
        start_replica(&replicas[victim], &g, victim, ++generation[victim]);
    }
    writer_thread_join(&w);
    started = harness_now_ms();
    HARNESS_WAIT_UNTIL(settled(&g, -1), 60000);
    cr_log_info("%s: %d kills, %d events committed, settled %lld ms after the writer finished", bus,
                kills, atomic_load(&w.committed), harness_now_ms() - started);
    for (int i = 0; i < REPLICAS; i++) {
        consume_test_assert_running(&replicas[i], "a consumer replica");
        consume_test_stop(&replicas[i], 10000);
    }
    cr_assert_geq(kills, 5, "too few kills to mean anything");
    cr_log_info("%s: %lld redeliveries", bus, redeliveries(&g, atomic_load(&w.committed)));
    expect_each_handler_once();
    consume_group_fini(&g);
}

Test(consumer_chaos, consumers_killed_again_and_again_while_writers_and_relays_run_on_jetstream)
{
    consumers_killed_while_writers_run("jetstream");
}

Test(consumer_chaos, consumers_killed_again_and_again_while_writers_run_on_the_db_backend)
{
    consumers_killed_while_writers_run("db");
}

/* ---- FAULTS.md T12: backend terminations ------------------------------------------------- */

static void
backends_terminated_again_and_again(const char *bus)
{
    enum { EVENTS = 4000 };
    struct harness_proc replicas[REPLICAS];
    struct consume_group g;
    struct writer_thread w;
    long long terminated = 0, started;

    consume_group_init(&g, bus, "TERM", NULL);
    relay_env_set(&g.env, "OUTBOX_MAX_ATTEMPTS", "1"); /* one spent attempt dead-letters */
    relay_env_set(&g.env, "OUTBOX_BATCH_SIZE", "50");
    for (int i = 0; i < REPLICAS; i++) {
        start_replica(&replicas[i], &g, i, 0);
    }
    chaos_start_writer(&w, EVENTS, 40, 40);
    while (!atomic_load(&w.done)) {
        /* Not waiting for a condition: the termination schedule of T12, shortened. */
        harness_sleep_ms(chaos_random_ms(200, 500));
        terminated += chaos_terminate_a_backend(conn);
    }
    writer_thread_join(&w);
    started = harness_now_ms();
    HARNESS_WAIT_UNTIL(settled(&g, -1), 60000);
    cr_log_info("%s: %lld sessions terminated, %d events committed, %d writer statements lost; "
                "settled %lld ms after the writer finished",
                bus, terminated, atomic_load(&w.committed), atomic_load(&w.failures),
                harness_now_ms() - started);
    cr_assert_geq(terminated, 5, "too few terminations to mean anything");
    for (int i = 0; i < REPLICAS; i++) {
        consume_test_assert_running(&replicas[i], "a consumer (terminations must not need it)");
        consume_test_stop(&replicas[i], 10000);
    }
    cr_assert_geq(harness_scalar_ll(conn, "SELECT count(*) FROM public.committed"),
                  atomic_load(&w.committed), "acknowledged commits were lost");
    expect_each_handler_once();
    consume_group_fini(&g); /* the group's relay must have ridden them out too: it exits 0 */
}

Test(consumer_chaos, backends_terminated_again_and_again_under_jetstream_consumers_and_relay)
{
    backends_terminated_again_and_again("jetstream");
}

Test(consumer_chaos, backends_terminated_again_and_again_under_db_backend_consumers)
{
    backends_terminated_again_and_again("db");
}

/* ---- PostgreSQL restarts ----------------------------------------------------------------- */

static void
postgresql_restarted_again_and_again(const char *bus)
{
    enum { EVENTS = 4000 };
    struct harness_proc replicas[REPLICAS];
    struct consume_group g;
    struct writer_thread w;
    long long started;

    consume_group_init(&g, bus, "PGCHAOS", NULL);
    relay_env_set(&g.env, "OUTBOX_MAX_ATTEMPTS", "1"); /* one spent attempt dead-letters */
    for (int i = 0; i < REPLICAS; i++) {
        start_replica(&replicas[i], &g, i, 0);
    }
    chaos_start_writer(&w, EVENTS, 40, 40);
    for (int round = 0; round < 3; round++) {
        /* Not waiting for a condition: the crash schedule of T11, shortened. */
        harness_sleep_ms(chaos_random_ms(1000, 2000));
        harness_pg_stop("immediate");
        harness_sleep_ms(chaos_random_ms(0, 1000));
        harness_pg_start();
    }
    PQfinish(conn);
    conn = PQconnectdb(harness_db_url());
    cr_assert_eq(PQstatus(conn), CONNECTION_OK, "%s", PQerrorMessage(conn));
    HARNESS_WAIT_UNTIL(atomic_load(&w.done), 120000);
    writer_thread_join(&w);
    started = harness_now_ms();
    HARNESS_WAIT_UNTIL(settled(&g, -1), 60000);
    cr_log_info("%s: %d events committed, %d writer statements lost to outages; settled %lld ms "
                "after the writer finished",
                bus, atomic_load(&w.committed), atomic_load(&w.failures),
                harness_now_ms() - started);
    for (int i = 0; i < REPLICAS; i++) {
        consume_test_assert_running(&replicas[i], "a consumer (restarts must not need it)");
        cr_assert(harness_proc_log_contains(&replicas[i], "database unavailable"),
                  "consumer %d never lost PostgreSQL: the restarts missed it", i + 1);
        consume_test_stop(&replicas[i], 10000);
    }
    /* Durable iff committed: every commit the writer saw acknowledged survived the crashes. */
    cr_assert_geq(harness_scalar_ll(conn, "SELECT count(*) FROM public.committed"),
                  atomic_load(&w.committed), "acknowledged commits were lost");
    expect_each_handler_once();
    consume_group_fini(&g);
}

Test(consumer_server_chaos, postgresql_restarted_again_and_again_under_jetstream_consumers)
{
    postgresql_restarted_again_and_again("jetstream");
}

Test(consumer_server_chaos, postgresql_restarted_again_and_again_under_db_backend_consumers)
{
    postgresql_restarted_again_and_again("db");
}
