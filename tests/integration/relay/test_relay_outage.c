/* SPDX-License-Identifier: MIT */
/*
 * test_relay_outage.c - `outboxd relay` through server outages: nats-server
 * killed and restarted, and frozen (SIGSTOP) for longer than the publish
 * timeout, PostgreSQL restarted under the relay, and relays started while
 * either server is down. An outage spends no attempt and dead-letters
 * nothing; everything committed is published after recovery, with no
 * relay restarted by hand. Every test restarts a server, so the harness
 * runs them one at a time.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "harness.h"
#include "relay_check.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { BACKLOG = 6000, RELAYS = 2 };

static PGconn *conn;

static void
setup(void)
{
    harness_servers_exclusive(); /* before connecting: these tests stop servers */
    conn = harness_pg_connect_fresh();
    relay_test_prepare(conn);
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(relay_outage, .init = setup, .fini = teardown, .timeout = 120);

/* The test's connection again, after PostgreSQL restarted. */
static void
reconnect(void)
{
    PQfinish(conn);
    conn = PQconnectdb(harness_db_url());
    cr_assert_eq(PQstatus(conn), CONNECTION_OK, "%s", PQerrorMessage(conn));
}

static void
start_relays(struct harness_proc *relays, struct relay_env *env, const char *tag)
{
    for (int i = 0; i < RELAYS; i++) {
        char name[48];

        snprintf(name, sizeof(name), "%s-%d", tag, i + 1);
        relay_test_start(&relays[i], env, name);
    }
}

/* After the outage: everything settles with the same relays, and no attempt was spent. */
static void
expect_recovered(struct harness_proc *relays, const char *stream, int events)
{
    long long started = harness_now_ms();

    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 60000);
    cr_log_info("%s: settled %lld ms after recovery", stream, harness_now_ms() - started);
    for (int i = 0; i < RELAYS; i++) {
        relay_test_assert_running(&relays[i], "a relay (it must ride out the outage)");
        relay_test_stop(&relays[i], 10000);
    }
    cr_assert_eq(harness_scalar_ll(conn, "SELECT coalesce(sum(attempts), 0) FROM outbox.events"), 0,
                 "the outage spent attempts");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters"), 0,
                 "the outage dead-lettered events");

    cr_assert_eq(relay_test_count(conn, "status = 'done'"), events);
    cr_assert_eq(relay_test_check(conn, stream).stream, (size_t)events);
}

/*
 * A broker outage hands leased rows back, deferred: none waits out its lease
 * (a database outage may: a lease whose commit reply was lost must expire).
 */
static void
expect_no_lease_expired(void)
{
    cr_assert_eq(harness_scalar_ll(conn, "SELECT coalesce(sum(lease_expiries), 0) FROM "
                                         "outbox.events"),
                 0, "rows leased when the broker went away were held past their lease");
}

static int
any_logged(struct harness_proc *relays, const char *needle)
{
    for (int i = 0; i < RELAYS; i++) {
        if (harness_proc_log_contains(&relays[i], needle)) {
            return 1;
        }
    }
    return 0;
}

Test(relay_outage, nats_killed_and_restarted_mid_flight_spends_no_attempt_and_loses_nothing)
{
    struct harness_proc relays[RELAYS];
    struct relay_env env;

    relay_test_enqueue(conn, BACKLOG);
    relay_test_env(&env, "OUT_NATS_KILL", "outnatskill");
    relay_env_set(&env, "OUTBOX_BATCH_SIZE", "50");
    relay_env_set(&env, "OUTBOX_LEASE_SECONDS", "2");
    start_relays(relays, &env, "natskill");
    HARNESS_WAIT_UNTIL(relay_test_count(conn, "status = 'done'") >= BACKLOG / 4, 30000);
    harness_nats_kill(SIGKILL);
    HARNESS_WAIT_UNTIL(any_logged(relays, "nats disconnected"), 10000);
    cr_assert_gt(relay_test_unfinished(conn), 0, "the outage came too late to matter");
    /* Not waiting for a condition: the outage outlasts the 2 s lease of any batch in hand. */
    harness_sleep_ms(3000);
    harness_nats_start();
    expect_recovered(relays, "OUT_NATS_KILL", BACKLOG);
    expect_no_lease_expired();
    relay_env_fini(&env);
}

Test(relay_outage, nats_frozen_longer_than_the_publish_timeout_spends_no_attempt)
{
    struct harness_proc relays[RELAYS];
    struct relay_env env;
    long long frozen_at;

    relay_test_enqueue(conn, BACKLOG);
    relay_test_env(&env, "OUT_NATS_STOP", "outnatsstop");
    relay_env_set(&env, "OUTBOX_BATCH_SIZE", "50");
    start_relays(relays, &env, "natsstop");
    HARNESS_WAIT_UNTIL(relay_test_count(conn, "status = 'done'") >= BACKLOG / 4, 30000);
    harness_nats_kill(SIGSTOP);
    frozen_at = harness_now_ms();
    /* Acks stop coming: the relays give up on a batch after the 1 s publish timeout. */
    HARNESS_WAIT_UNTIL(any_logged(relays, "publishing paused"), 10000);
    /* Not waiting for a condition: the outage lasts three publish timeouts. */
    harness_sleep_ms(
        (int)(frozen_at + 3000 - harness_now_ms() > 0 ? frozen_at + 3000 - harness_now_ms() : 0));
    cr_assert_gt(relay_test_unfinished(conn), 0, "the outage came too late to matter");
    harness_nats_kill(SIGCONT);
    expect_recovered(relays, "OUT_NATS_STOP", BACKLOG);
    expect_no_lease_expired();
    relay_env_fini(&env);
}

Test(relay_outage, postgresql_restarted_under_the_relays_loses_nothing)
{
    struct harness_proc relays[RELAYS];
    struct relay_env env;

    relay_test_enqueue(conn, BACKLOG);
    relay_test_env(&env, "OUT_PG_RESTART", "outpgrestart");
    relay_env_set(&env, "OUTBOX_BATCH_SIZE", "50");
    start_relays(relays, &env, "pgrestart");
    HARNESS_WAIT_UNTIL(relay_test_count(conn, "status = 'done'") >= BACKLOG / 4, 30000);
    harness_pg_stop("immediate");
    HARNESS_WAIT_UNTIL(any_logged(relays, "database unavailable"), 10000);
    harness_pg_start();
    reconnect();
    cr_assert_gt(relay_test_unfinished(conn), 0, "the outage came too late to matter");
    expect_recovered(relays, "OUT_PG_RESTART", BACKLOG);
    relay_env_fini(&env);
}

Test(relay_outage, a_relay_started_while_postgresql_is_down_connects_when_it_comes_up)
{
    struct harness_proc relays[RELAYS];
    struct relay_env env;

    relay_test_env(&env, "OUT_PG_DOWN", "outpgdown");
    harness_pg_stop("fast");
    start_relays(relays, &env, "pgdown");
    HARNESS_WAIT_UNTIL(any_logged(relays, "database unavailable"), 20000);
    relay_test_assert_running(&relays[0], "a relay started without its database");
    harness_pg_start();
    reconnect();
    relay_test_enqueue(conn, 300);
    expect_recovered(relays, "OUT_PG_DOWN", 300);
    relay_env_fini(&env);
}

Test(relay_outage, a_relay_started_while_nats_is_down_connects_when_it_comes_up)
{
    struct harness_proc relays[RELAYS];
    struct relay_env env;

    relay_test_enqueue(conn, 300);
    relay_test_env(&env, "OUT_NATS_DOWN", "outnatsdown");
    harness_nats_kill(SIGKILL);
    start_relays(relays, &env, "natsdown");
    HARNESS_WAIT_UNTIL(any_logged(relays, "broker unavailable"), 20000);
    relay_test_assert_running(&relays[0], "a relay started without its broker");
    cr_assert_eq(relay_test_count(conn, "status = 'pending'"), 300, "nothing leased without NATS");
    harness_nats_start();
    expect_recovered(relays, "OUT_NATS_DOWN", 300);
    relay_env_fini(&env);
}

/* 1 when the last `up` line of the relay's log comes after its last `down` line. */
static int
logged_back_up(const struct harness_proc *relay, const char *down, const char *up)
{
    char *log = harness_proc_log(relay);
    const char *last_down = NULL, *last_up = NULL;
    int back;

    for (const char *p = log; p != NULL && (p = strstr(p, down)) != NULL; p++) {
        last_down = p;
    }
    for (const char *p = log; p != NULL && (p = strstr(p, up)) != NULL; p++) {
        last_up = p;
    }
    back = last_down != NULL && last_up != NULL && last_up > last_down;
    free(log);
    return back;
}

/*
 * Readiness follows the broker even with nothing to publish: after an
 * outage, a relay whose broker answers again is ready again (it once
 * stayed not-ready, its health check failing, until some publish landed).
 */
Test(relay_outage, an_idle_relay_is_ready_again_once_nats_comes_back)
{
    struct harness_proc relay;
    struct relay_env env;

    relay_test_env(&env, "OUT_IDLE", "outidle");
    relay_test_start(&relay, &env, "idle-1");
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&relay, "broker connected"), 20000);
    harness_nats_kill(SIGKILL);
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&relay, "broker unavailable"), 20000);
    cr_assert(!logged_back_up(&relay, "broker unavailable", "broker connected"));
    harness_nats_start();
    HARNESS_WAIT_UNTIL(logged_back_up(&relay, "broker unavailable", "broker connected"), 30000);
    relay_test_assert_running(&relay, "an idle relay through a broker outage");
    relay_test_stop(&relay, 10000);
    relay_env_fini(&env);
}
