/* SPDX-License-Identifier: MIT */
/*
 * test_ledger_order_wait.c - a transactional batch whose every event is
 * early waits a little for a predecessor before it parks (migration 0026):
 * when the predecessor's transaction commits within the wait, the batch
 * runs at once, nothing parked; when none comes, it parks after the wait,
 * as before. The wait is what keeps two replicas draining one busy
 * aggregate in turns instead of parking and sweeping every event.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "ledger/ledger.h"
#include "ledger_order_helpers.h"

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh_ordered();
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(ledger_order_wait, .init = setup, .fini = teardown, .timeout = 120);

/* One event claimed as done in a transaction of its own, by a thread, and committed. */
struct early_claim {
    struct obx_ledger *ledger;
    const struct obx_ledger_event *event;
    struct obx_claim claim;
    outbox_status status;
    long long took_ms; /* the claim call alone */
};

static void *
claim_early(void *arg)
{
    struct early_claim *e = arg;
    outbox_error err;
    long long t0;

    e->status = obx_ledger_begin(e->ledger, &err);
    if (e->status == OUTBOX_OK) {
        t0 = harness_now_ms();
        e->status =
            obx_ledger_claim_as_done(e->ledger, "audit", e->event, 1, 1000, &e->claim, &err);
        e->took_ms = harness_now_ms() - t0;
    }
    if (e->status == OUTBOX_OK) {
        e->status = obx_ledger_commit(e->ledger, &err);
    }
    return NULL;
}

/* Claims in this test's database sleeping in the wait for a predecessor. */
static long long
claims_waiting_for_a_predecessor(void)
{
    return harness_scalar_ll(conn, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = "
                                   "'PgSleep' AND query LIKE '%ledger_claim_ordered%' AND datname "
                                   "= current_database()");
}

static long long
parked_count(void)
{
    return harness_scalar_ll(conn, "SELECT count(*) FROM outbox.parked_events");
}

/*
 * Replica A has claimed event 1 of an aggregate and not committed yet;
 * replica B claims event 2 alone. B must wait (not park), and run event 2
 * once A commits: A's claim made the progress row B needs, and B's wait
 * holds no lock that would keep A from committing.
 */
Test(ledger_order_wait, a_wholly_early_batch_runs_once_its_predecessor_commits_within_the_wait)
{
    struct obx_ledger *a = helper_ledger_open("order-wait-a");
    struct early_claim b = {.ledger = helper_ledger_open("order-wait-b")};
    struct helper_ordered o;
    struct obx_claim first;
    outbox_error err;
    pthread_t thread;
    long long waiting = 0;

    helper_register_ordered(a, "audit");
    o = helper_ordered_new(conn, 1, 2);
    LEDGER_OK(obx_ledger_begin(a, &err));
    LEDGER_OK(obx_ledger_claim_as_done(a, "audit", &o.events[0], 1, 1000, &first, &err));
    cr_assert_eq(first.state, OBX_CLAIM_RUN);

    b.event = &o.events[1];
    cr_assert_eq(pthread_create(&thread, NULL, claim_early, &b), 0);
    /* the count as seen: read again, it may catch the waiter between its sleeps */
    for (int i = 0; i < 2000 && (waiting = claims_waiting_for_a_predecessor()) == 0; i++) {
        harness_sleep_ms(1);
    }
    cr_assert_eq(waiting, 1, "the early claim waits for its predecessor");
    LEDGER_OK(obx_ledger_commit(a, &err));
    cr_assert_eq(pthread_join(thread, NULL), 0);
    cr_assert_eq(b.status, OUTBOX_OK);
    cr_assert_eq(b.claim.state, OBX_CLAIM_RUN,
                 "event 2 runs once event 1 is done, not parked (got %d after %lld ms)",
                 b.claim.state, b.took_ms);
    cr_assert_eq(parked_count(), 0);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 2);
    helper_ordered_free(&o);
    obx_ledger_close(b.ledger);
    obx_ledger_close(a);
}

/* No predecessor comes: the early event parks after the wait, within its bound. */
Test(ledger_order_wait, a_wholly_early_batch_parks_after_the_wait_when_no_predecessor_comes)
{
    struct early_claim b = {.ledger = helper_ledger_open("order-wait-b")};
    struct helper_ordered o;

    helper_register_ordered(b.ledger, "audit");
    o = helper_ordered_new(conn, 1, 2);
    b.event = &o.events[1];
    claim_early(&b);
    cr_assert_eq(b.status, OUTBOX_OK);
    cr_assert_eq(b.claim.state, OBX_CLAIM_PARKED, "got %d", b.claim.state);
    cr_assert_eq(parked_count(), 1);
    /* It waited (100 ms, the claim's lock wait being longer), and not much more. */
    cr_assert_geq(b.took_ms, 90, "parked after %lld ms, without waiting", b.took_ms);
    cr_assert_lt(b.took_ms, 5000, "parked after %lld ms", b.took_ms);
    cr_assert_leq(helper_progress(conn, "audit", o.aggs[0]), 0, "nothing of it is done");
    helper_ordered_free(&o);
    obx_ledger_close(b.ledger);
}
