/* SPDX-License-Identifier: MIT */
/*
 * test_claim_renewal.c - FAULTS.md T31, a handler outlives its claim's
 * lease: two `outboxd consume` replicas share events whose exec: handler
 * runs 4 s under a 2 s ledger lease. The claim is renewed while the
 * handler runs, so no two runs of one (event, handler) overlap; a claim
 * lost while its handler runs (taken over under it) stops the handler and
 * spends no attempt; and a lease the daemon cannot keep alive against the
 * handler timeout is refused at start (exit 2).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "consume_test.h"
#include "harness.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;
static char dir[64];

static void
setup(void)
{
    consume_test_suite_begin(&conn, dir);
}

static void
teardown(void)
{
    consume_test_suite_end(&conn, dir);
}

TestSuite(claim_renewal, .init = setup, .fini = teardown, .timeout = 180);

/* Each run appends "start EVENT PID T" and, if it was not stopped, "end EVENT PID T". */
#define SLOW_HANDLER(seconds)                                                                \
    "slow=exec:echo \"start $OUTBOX_EVENT_ID $$ $(date +%s.%N)\" >> \"$CONSUME_DIR/runs\"; " \
    "sleep " seconds "; echo \"end $OUTBOX_EVENT_ID $$ $(date +%s.%N)\" >> \"$CONSUME_DIR/runs\""

struct run {
    char event[40];
    long pid;
    double start, end; /* end 0: no end line (stopped, or still running) */
};

/* The runs recorded in `dir`/runs; returns how many (at most `cap`). */
static size_t
read_runs(struct run *runs, size_t cap)
{
    char path[128], what[8], event[40];
    long pid;
    double t;
    size_t n = 0;
    FILE *f;

    snprintf(path, sizeof(path), "%s/runs", dir);
    f = fopen(path, "r");
    while (f != NULL && fscanf(f, "%7s %39s %ld %lf", what, event, &pid, &t) == 4) {
        if (strcmp(what, "start") == 0 && n < cap) {
            runs[n] = (struct run){.pid = pid, .start = t};
            snprintf(runs[n].event, sizeof(runs[n].event), "%s", event);
            n++;
        }
        for (size_t i = 0; strcmp(what, "end") == 0 && i < n; i++) {
            if (runs[i].pid == pid && strcmp(runs[i].event, event) == 0) {
                runs[i].end = t;
            }
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return n;
}

/* 1 once every run recorded has ended. */
static int
all_runs_ended(void)
{
    struct run runs[16];
    size_t n = read_runs(runs, 16);

    for (size_t i = 0; i < n; i++) {
        if (runs[i].end == 0) {
            return 0;
        }
    }
    return 1;
}

/*
 * Two replicas, a 4 s handler, a 2 s lease: the second replica finds the
 * claim renewed (busy) for as long as the first runs, then done. Without
 * renewal it takes the claim over at 2 s and runs the handler beside the
 * first.
 */
Test(claim_renewal, two_replicas_never_run_one_handler_on_one_event_at_the_same_time)
{
    enum { EVENTS = 2 };
    const char *const handlers[] = {SLOW_HANDLER("4"), NULL};
    struct harness_proc w1, w2;
    struct consume_group g;
    struct run runs[16];
    size_t n;

    consume_group_init(&g, "db", "T31", dir);
    relay_env_set(&g.env, "OUTBOX_LEDGER_LEASE_SECONDS", "2");
    relay_test_enqueue(conn, EVENTS);
    consume_test_start(&w1, &g.env, "w1", handlers);
    consume_test_start(&w2, &g.env, "w2", handlers);
    HARNESS_WAIT_UNTIL(harness_scalar_ll(conn,
                                         "SELECT count(*) FROM outbox.processed_events "
                                         "WHERE handler = 'slow' AND status = 'done'") == EVENTS,
                       60000);
    /* A run that started late (a takeover) ends within its 4 s. */
    HARNESS_WAIT_UNTIL(all_runs_ended(), 10000);
    consume_test_stop(&w1, 15000);
    consume_test_stop(&w2, 15000);
    n = read_runs(runs, 16);
    cr_log_info("T31: %zu run(s) for %d events", n, EVENTS);
    for (size_t i = 0; i < n; i++) {
        cr_log_info("run event=%s pid=%ld %.3f..%.3f", runs[i].event, runs[i].pid, runs[i].start,
                    runs[i].end);
        cr_assert_gt(runs[i].end, 0, "run %zu (pid %ld) was stopped", i, runs[i].pid);
        for (size_t j = 0; j < i; j++) {
            int overlap = strcmp(runs[i].event, runs[j].event) == 0 &&
                          runs[i].start < runs[j].end && runs[j].start < runs[i].end;

            cr_assert(!overlap, "two runs of event %s overlap: %.3f..%.3f and %.3f..%.3f",
                      runs[i].event, runs[j].start, runs[j].end, runs[i].start, runs[i].end);
        }
    }
    cr_assert_eq(n, EVENTS, "each event must run once, not %zu runs for %d events", n, EVENTS);
    consume_test_expect_nothing_spent(conn);
    consume_group_fini(&g);
}

/*
 * The claim is taken from under a running handler (its owner token
 * replaced, as a takeover does): the next renewal finds it gone, the
 * handler is killed long before its 30 s, and nothing is recorded against
 * the event - no attempt, no dead letter.
 */
Test(claim_renewal, a_claim_lost_while_its_handler_runs_stops_it_and_spends_no_attempt)
{
    const char *const handlers[] = {SLOW_HANDLER("30"), NULL};
    struct harness_proc w1;
    struct consume_group g;
    struct run runs[4];

    consume_group_init(&g, "db", "LOST", dir);
    relay_env_set(&g.env, "OUTBOX_LEDGER_LEASE_SECONDS", "3");
    relay_test_enqueue(conn, 1);
    consume_test_start(&w1, &g.env, "w1", handlers);
    HARNESS_WAIT_UNTIL(read_runs(runs, 4) == 1, 30000);
    harness_exec(conn, "UPDATE outbox.processed_events SET owner_token = gen_random_uuid(), "
                       "claimed_until = now() + interval '1 hour' WHERE handler = 'slow'");
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&w1, "claim lost before done, handler stopped"),
                       5000);
    HARNESS_WAIT_UNTIL(kill((pid_t)runs[0].pid, 0) != 0, 2000);
    cr_assert_eq(read_runs(runs, 4), 1, "the handler ran again");
    cr_assert_eq(runs[0].end, 0, "the handler was not stopped");
    consume_test_stop(&w1, 15000);
    consume_test_expect_nothing_spent(conn);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.processed_events "
                                         "WHERE handler = 'slow' AND last_error IS NOT NULL"),
                 0, "a failure was recorded for the lost claim");
    consume_group_fini(&g);
}

/* A 1 s lease cannot be kept alive against a 30 s exec: handler timeout: refused, naming both. */
Test(claim_renewal, a_lease_that_cannot_cover_the_handler_timeout_is_refused_at_start)
{
    const char *const handlers[] = {SLOW_HANDLER("1"), NULL};
    struct harness_proc p;
    struct consume_group g;
    int status;

    consume_group_init(&g, "db", "REFUSE", dir);
    relay_env_set(&g.env, "OUTBOX_LEDGER_LEASE_SECONDS", "1");
    relay_env_set(&g.env, "OUTBOX_HANDLER_TIMEOUT_SECONDS", "30");
    consume_test_start(&p, &g.env, "refused", handlers);
    status = harness_proc_wait(&p, 20000);
    cr_assert_eq(status, 2, "exit status %d:\n%s", status, harness_proc_log(&p));
    cr_assert(harness_proc_log_contains(&p, "OUTBOX_LEDGER_LEASE_SECONDS=1") &&
                  harness_proc_log_contains(&p, "OUTBOX_HANDLER_TIMEOUT_SECONDS=30"),
              "the refusal must name both settings and values:\n%s", harness_proc_log(&p));
    consume_group_fini(&g);
}
