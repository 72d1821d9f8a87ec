/* SPDX-License-Identifier: MIT */
/*
 * test_wakeup.c - the relay's wake-up: a committed insert wakes a waiting
 * store within milliseconds, a rolled-back one does not, and concurrent
 * writers neither block each other nor all pay for NOTIFY's commit lock
 * (only the writer holding the try-lock notifies). With
 * OUTBOX_WAKEUP_BENCH=1 it also prints writer commit throughput with no
 * trigger, with this trigger and with an always-NOTIFY trigger.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "store/store.h"
#include "store_helpers.h"

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(wakeup, .init = setup, .fini = teardown, .timeout = 90);

static const char insert_sql[] =
    "SELECT outbox.enqueue('movie', gen_random_uuid(), 'review.logged', '{\"n\":1}')";

/* A monotonic clock of our own: the harness's helpers belong to the test thread. */
static long long
clock_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* Runs `sql` on a worker thread's connection; returns 0, or -1 with the reason in `failure`. */
static int
thread_exec(PGconn *c, const char *sql, char *failure, size_t cap)
{
    PGresult *res = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(res);
    int rc = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? 0 : -1;

    if (rc != 0 && failure[0] == '\0') {
        snprintf(failure, cap, "%s: %s", sql, PQerrorMessage(c));
    }
    PQclear(res);
    return rc;
}

static struct obx_store *
listening_store(void)
{
    struct obx_store *store = helper_store_open("wakeup-test");
    outbox_error err;
    int woken = 0;

    cr_assert_eq(obx_store_listen(store, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_eq(obx_store_wait(store, 0, &woken, &err), OUTBOX_OK, "%s", err.message);
    return store;
}

struct delayed_commit {
    const char *url;
    int hold_ms;              /* how long the transaction stays open after its insert */
    long long commit_sent_ms; /* clock_ms() just before COMMIT */
    char failure[512];
};

static void *
insert_then_commit_later(void *arg)
{
    struct delayed_commit *d = arg;
    PGconn *c = PQconnectdb(d->url);

    if (thread_exec(c, "BEGIN", d->failure, sizeof(d->failure)) == 0 &&
        thread_exec(c, insert_sql, d->failure, sizeof(d->failure)) == 0) {
        pause_ms(d->hold_ms); /* so that the store is already waiting when we commit */
        d->commit_sent_ms = clock_ms();
        thread_exec(c, "COMMIT", d->failure, sizeof(d->failure));
    }
    PQfinish(c);
    return NULL;
}

Test(wakeup, a_commit_on_another_connection_wakes_a_waiting_store_within_100_ms)
{
    struct obx_store *store = listening_store();
    struct delayed_commit d = {.url = harness_db_url(), .hold_ms = 300};
    long long wait_started_ms, woken_ms;
    pthread_t writer;
    outbox_error err;
    int woken = 0;

    cr_assert_eq(pthread_create(&writer, NULL, insert_then_commit_later, &d), 0);
    wait_started_ms = clock_ms();
    cr_assert_eq(obx_store_wait(store, 5000, &woken, &err), OUTBOX_OK, "%s", err.message);
    woken_ms = clock_ms();
    pthread_join(writer, NULL);
    cr_assert_str_empty(d.failure, "%s", d.failure);
    cr_assert_eq(woken, 1, "no wake-up within 5 s");
    cr_assert_geq(woken_ms, d.commit_sent_ms, "woken before the commit: the insert woke it");
    cr_assert_lt(woken_ms - d.commit_sent_ms, 100, "woken %lld ms after COMMIT was sent",
                 woken_ms - d.commit_sent_ms);
    cr_log_info("woken %lld ms after COMMIT was sent, after waiting %lld ms",
                woken_ms - d.commit_sent_ms, woken_ms - wait_started_ms);
    obx_store_close(store);
}

Test(wakeup, a_rolled_back_insert_does_not_wake_the_store)
{
    struct obx_store *store = listening_store();
    PGconn *writer = helper_connect();
    outbox_error err;
    int woken = 1;

    harness_exec(writer, "BEGIN");
    harness_exec(writer, insert_sql);
    harness_exec(writer, "ROLLBACK");
    cr_assert_eq(obx_store_wait(store, 500, &woken, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_eq(woken, 0, "a rolled-back insert woke the store");
    /* The same insert, committed, does: the silence above was not a deaf store. */
    harness_exec(writer, insert_sql);
    cr_assert_eq(obx_store_wait(store, 2000, &woken, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_eq(woken, 1);
    PQfinish(writer);
    obx_store_close(store);
}

static int
woken_without_waiting(struct obx_store *store)
{
    outbox_error err;
    int woken = 0;

    cr_assert_eq(obx_store_wait(store, 0, &woken, &err), OUTBOX_OK, "%s", err.message);
    return woken;
}

Test(wakeup, a_zero_timeout_wait_reports_a_notification_that_has_arrived)
{
    struct obx_store *store = listening_store();
    PGconn *writer = helper_connect();

    cr_assert_eq(woken_without_waiting(store), 0);
    harness_exec(writer, insert_sql);
    /* A relay that polls with timeout 0 between batches must still see it. */
    HARNESS_WAIT_UNTIL(woken_without_waiting(store), 2000);
    cr_assert_eq(woken_without_waiting(store), 0, "each notification wakes once");
    PQfinish(writer);
    obx_store_close(store);
}

Test(wakeup, a_wait_without_notifications_times_out_on_time)
{
    struct obx_store *store = listening_store();
    long long started_ms = clock_ms(), waited_ms;
    outbox_error err;
    int woken = 1;

    cr_assert_eq(obx_store_wait(store, 200, &woken, &err), OUTBOX_OK, "%s", err.message);
    waited_ms = clock_ms() - started_ms;
    cr_assert_eq(woken, 0);
    cr_assert(waited_ms >= 190 && waited_ms < 1000, "waited %lld ms for 200", waited_ms);
    obx_store_close(store);
}

enum { WRITERS = 16, HOLD_MS = 100 };

struct writer {
    const char *url;
    pthread_barrier_t *inserted; /* every writer has inserted and holds its transaction */
    long long insert_ms;         /* how long the INSERT took */
    long long committed_at_ms;
    char failure[512];
};

static void *
writer_run(void *arg)
{
    struct writer *w = arg;
    PGconn *c = PQconnectdb(w->url);
    long long started_ms;
    int ok;

    /* A blocking lock in the trigger would deadlock at the barrier; fail instead. */
    ok = thread_exec(c, "SET statement_timeout = '5s'", w->failure, sizeof(w->failure)) == 0 &&
         thread_exec(c, "BEGIN", w->failure, sizeof(w->failure)) == 0;
    started_ms = clock_ms();
    ok = ok && thread_exec(c, insert_sql, w->failure, sizeof(w->failure)) == 0;
    w->insert_ms = clock_ms() - started_ms;
    pthread_barrier_wait(w->inserted);
    if (ok) {
        pause_ms(HOLD_MS);
        thread_exec(c, "COMMIT", w->failure, sizeof(w->failure));
    }
    w->committed_at_ms = clock_ms();
    PQfinish(c);
    return NULL;
}

/* A plain connection LISTENing on the wake-up channel, to count notifications. */
static PGconn *
counting_listener(void)
{
    PGconn *listener = helper_connect();

    harness_exec(listener, "SELECT outbox.wakeup_listen('outbox')");
    return listener;
}

/* Every notification committed so far: the server sends them before answering a query. */
static int
count_notifications(PGconn *listener)
{
    PGnotify *n;
    int count = 0;

    harness_exec(listener, "SELECT 1");
    while ((n = PQnotifies(listener)) != NULL) {
        PQfreemem(n);
        count++;
    }
    return count;
}

Test(wakeup, concurrent_writers_neither_block_each_other_nor_all_notify)
{
    PGconn *listener = counting_listener();
    struct writer writers[WRITERS];
    pthread_t threads[WRITERS];
    pthread_barrier_t inserted;
    long long released_ms, last_commit_ms = 0, slowest_insert_ms = 0;
    int notifications;

    cr_assert_eq(pthread_barrier_init(&inserted, NULL, WRITERS + 1), 0);
    for (int i = 0; i < WRITERS; i++) {
        writers[i] = (struct writer){.url = harness_db_url(), .inserted = &inserted};
        cr_assert_eq(pthread_create(&threads[i], NULL, writer_run, &writers[i]), 0);
    }
    pthread_barrier_wait(&inserted);
    released_ms = clock_ms();
    for (int i = 0; i < WRITERS; i++) {
        pthread_join(threads[i], NULL);
        cr_assert_str_empty(writers[i].failure, "writer %d: %s", i, writers[i].failure);
        last_commit_ms = writers[i].committed_at_ms > last_commit_ms ? writers[i].committed_at_ms
                                                                     : last_commit_ms;
        slowest_insert_ms =
            writers[i].insert_ms > slowest_insert_ms ? writers[i].insert_ms : slowest_insert_ms;
    }
    pthread_barrier_destroy(&inserted);
    notifications = count_notifications(listener);
    cr_log_info("%d writers: %d notification(s), slowest insert %lld ms, all committed %lld ms "
                "after the barrier (each held %d ms)",
                WRITERS, notifications, slowest_insert_ms, last_commit_ms - released_ms, HOLD_MS);
    cr_assert_eq(helper_count(conn, "true"), WRITERS, "every writer committed");
    cr_assert_eq(notifications, 1, "only the try-lock holder notifies, got %d", notifications);
    cr_assert_lt(last_commit_ms - released_ms, WRITERS * HOLD_MS / 2,
                 "the writers ran one after another: %lld ms", last_commit_ms - released_ms);
    PQfinish(listener);
}

/* Throughput: measured and printed, never gated (performance belongs in outbox-bench). */

enum { BENCH_WRITERS = 8, BENCH_ROUNDS = 3, BENCH_ROUND_MS = 1000 };

struct bench_writer {
    const char *url;
    long long deadline_ms;
    long commits;
    char failure[512];
};

static void *
bench_writer_run(void *arg)
{
    struct bench_writer *w = arg;
    PGconn *c = PQconnectdb(w->url);

    while (clock_ms() < w->deadline_ms &&
           thread_exec(c, insert_sql, w->failure, sizeof(w->failure)) == 0) {
        w->commits++; /* autocommit: one event per transaction, the worst case for NOTIFY */
    }
    PQfinish(c);
    return NULL;
}

/* Commits of BENCH_WRITERS writers in BENCH_ROUND_MS, with a listener draining. */
static long long
writer_commits(PGconn *listener, int *notifications)
{
    struct bench_writer writers[BENCH_WRITERS];
    pthread_t threads[BENCH_WRITERS];
    long long started_ms = clock_ms(), total = 0;
    struct pollfd pfd = {.fd = PQsocket(listener), .events = POLLIN};

    for (int i = 0; i < BENCH_WRITERS; i++) {
        writers[i] = (struct bench_writer){.url = harness_db_url(),
                                           .deadline_ms = started_ms + BENCH_ROUND_MS};
        cr_assert_eq(pthread_create(&threads[i], NULL, bench_writer_run, &writers[i]), 0);
    }
    while (clock_ms() < started_ms + BENCH_ROUND_MS) {
        PGnotify *n;

        if (poll(&pfd, 1, 50) > 0) {
            cr_assert(PQconsumeInput(listener));
        }
        while ((n = PQnotifies(listener)) != NULL) {
            PQfreemem(n);
            (*notifications)++;
        }
    }
    for (int i = 0; i < BENCH_WRITERS; i++) {
        pthread_join(threads[i], NULL);
        cr_assert_str_empty(writers[i].failure, "%s", writers[i].failure);
        total += writers[i].commits;
    }
    *notifications += count_notifications(listener);
    return total;
}

/* Which wake-up trigger is on: none, the try-lock one (0002_relay), or a plain NOTIFY. */
static const char *const bench_variants[][2] = {
    {"no trigger", "ALTER TABLE outbox.events DISABLE TRIGGER events_wakeup, "
                   "DISABLE TRIGGER events_always_notify"},
    {"try-lock trigger", "ALTER TABLE outbox.events ENABLE TRIGGER events_wakeup, "
                         "DISABLE TRIGGER events_always_notify"},
    {"always-NOTIFY trigger", "ALTER TABLE outbox.events DISABLE TRIGGER events_wakeup, "
                              "ENABLE TRIGGER events_always_notify"},
};

Test(wakeup, reports_writer_commit_throughput_with_and_without_the_trigger)
{
    const char *bench = getenv("OUTBOX_WAKEUP_BENCH");
    long long commits[3] = {0};
    int notifications[3] = {0};
    PGconn *listener;

    if (bench == NULL || strcmp(bench, "1") != 0) {
        cr_skip_test("set OUTBOX_WAKEUP_BENCH=1 to measure writer throughput");
    }
    listener = counting_listener();
    harness_exec(conn, "CREATE FUNCTION outbox.events_always_notify() RETURNS trigger "
                       "LANGUAGE plpgsql AS $$ BEGIN "
                       "PERFORM pg_notify(outbox.wakeup_channel(TG_TABLE_SCHEMA), ''); "
                       "RETURN NULL; END $$");
    harness_exec(conn, "CREATE TRIGGER events_always_notify AFTER INSERT ON outbox.events "
                       "FOR EACH STATEMENT EXECUTE FUNCTION outbox.events_always_notify()");
    /* Short rounds in rotating order, so drift on a busy machine hits all three alike. */
    for (int round = 0; round < BENCH_ROUNDS; round++) {
        for (int k = 0; k < 3; k++) {
            int v = (round + k) % 3;

            harness_exec(conn, bench_variants[v][1]);
            commits[v] += writer_commits(listener, &notifications[v]);
        }
    }
    fprintf(stderr,
            "wakeup throughput, %d writers, %d x %d ms per variant, one event per commit:\n",
            BENCH_WRITERS, BENCH_ROUNDS, BENCH_ROUND_MS);
    for (int v = 0; v < 3; v++) {
        fprintf(stderr, "  %-22s %8.0f commits/s  %6d notifications for %lld commits\n",
                bench_variants[v][0], (double)commits[v] * 1000.0 / (BENCH_ROUNDS * BENCH_ROUND_MS),
                notifications[v], commits[v]);
    }
    PQfinish(listener);
}
