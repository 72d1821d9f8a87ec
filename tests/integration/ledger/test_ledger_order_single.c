/* SPDX-License-Identifier: MIT */
/*
 * test_ledger_order_single.c - a transactional batch that brings one event
 * per aggregate, the usual batch over many aggregates, which migration 0027
 * checks with a shorter statement before the general one: the first events
 * of new aggregates make their progress rows; one early aggregate among
 * ready ones is parked while the others run (the rows the short statement
 * moved are undone and the general statement decides); an event below its
 * progress goes to the plain claim; and an aggregate that comes twice in a
 * batch of otherwise single events still runs in number order.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
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

TestSuite(ledger_order_single, .init = setup, .fini = teardown, .timeout = 180);

/* Event `seq` (1-based) of aggregate `agg` (0-based, in `o`'s order) of `per` each. */
static struct obx_ledger_event
event_of(const struct helper_ordered *o, int per, int agg, int seq)
{
    return o->events[agg * per + seq - 1];
}

/* Number 1 of five new aggregates in one batch: each runs and makes its row at 1. */
Test(ledger_order_single, first_events_of_new_aggregates_run_and_make_their_progress)
{
    struct obx_ledger *ledger = helper_ledger_open("order-single");
    struct helper_ordered o;
    struct obx_ledger_event batch[5];
    struct obx_claim claims[5];

    helper_register_ordered(ledger, "audit");
    o = helper_ordered_new(conn, 5, 2);
    for (int a = 0; a < 5; a++) {
        batch[a] = event_of(&o, 2, 4 - a, 1); /* not in key order: the statement sorts */
    }
    helper_claim_batch(ledger, batch, 5, claims);
    for (int a = 0; a < 5; a++) {
        cr_assert_eq(claims[a].state, OBX_CLAIM_RUN, "batch[%d] (got %d)", a, claims[a].state);
        cr_assert_eq(helper_progress(conn, "audit", o.aggs[a * 2]), 1, "aggregate %d", a);
    }
    cr_assert_eq(helper_count(conn, "processed_events", "status = 'done'"), 5);
    cr_assert_eq(helper_count(conn, "parked_events", "true"), 0);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}

/*
 * A's 1 and B's 1 are done; the batch brings A's 2 (next), B's 3 (B's 2 not
 * done: early, its row at 1) and C's 1 (new). A's and C's rows would move,
 * B's would not: B's 3 is parked, A's 2 and C's 1 run, and each row holds
 * the number of its event that ran.
 */
Test(ledger_order_single, an_early_aggregate_among_ready_ones_is_parked_and_the_others_run)
{
    struct obx_ledger *ledger = helper_ledger_open("order-single");
    struct helper_ordered o;
    struct obx_ledger_event batch[3];
    struct obx_claim claims[3];

    helper_register_ordered(ledger, "audit");
    o = helper_ordered_new(conn, 3, 3);
    batch[0] = event_of(&o, 3, 0, 1);
    batch[1] = event_of(&o, 3, 1, 1);
    helper_claim_batch(ledger, batch, 2, claims);
    cr_assert_eq(claims[0].state, OBX_CLAIM_RUN, "A's 1 (got %d)", claims[0].state);
    cr_assert_eq(claims[1].state, OBX_CLAIM_RUN, "B's 1 (got %d)", claims[1].state);
    batch[0] = event_of(&o, 3, 0, 2);
    batch[1] = event_of(&o, 3, 1, 3);
    batch[2] = event_of(&o, 3, 2, 1);
    helper_claim_batch(ledger, batch, 3, claims);
    cr_assert_eq(claims[0].state, OBX_CLAIM_RUN, "A's 2 follows its 1 (got %d)", claims[0].state);
    cr_assert_eq(claims[1].state, OBX_CLAIM_PARKED, "B's 2 is not done (got %d)", claims[1].state);
    cr_assert_eq(claims[2].state, OBX_CLAIM_RUN, "C's 1 (got %d)", claims[2].state);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 2);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[3]), 1, "B has run its 1 only");
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[6]), 1);
    cr_assert_eq(helper_count(conn, "parked_events", "true"), 1);
    cr_assert_eq(helper_count(conn, "processed_events", "status = 'done'"), 4,
                 "A's 1 and 2, B's 1, C's 1; not B's 3");
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}

/* A's 1 and 2 are done; A's 1 comes again beside B's 1: done already, A's row stays at 2. */
Test(ledger_order_single, a_redelivered_event_below_its_progress_is_done_and_the_others_run)
{
    struct obx_ledger *ledger = helper_ledger_open("order-single");
    struct helper_ordered o;
    struct obx_ledger_event batch[2];
    struct obx_claim claims[2];

    helper_register_ordered(ledger, "audit");
    o = helper_ordered_new(conn, 2, 2);
    helper_claim_batch(ledger, o.events, 2, claims); /* A's 1 and 2: a run */
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 2);
    batch[0] = event_of(&o, 2, 0, 1);
    batch[1] = event_of(&o, 2, 1, 1);
    helper_claim_batch(ledger, batch, 2, claims);
    cr_assert_eq(claims[0].state, OBX_CLAIM_DONE, "A's 1 is done already (got %d)",
                 claims[0].state);
    cr_assert_eq(claims[1].state, OBX_CLAIM_RUN, "B's 1 (got %d)", claims[1].state);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 2, "A's row does not go back");
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[2]), 1);
    cr_assert_eq(helper_count(conn, "parked_events", "true"), 0);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}

/* B's 2 then B's 1 beside A's 1: A runs; B's 1 runs, and its 2 (before it in the batch) parks. */
Test(ledger_order_single, an_aggregate_twice_in_a_batch_of_single_events_keeps_its_order)
{
    struct obx_ledger *ledger = helper_ledger_open("order-single");
    struct helper_ordered o;
    struct obx_ledger_event batch[3];
    struct obx_claim claims[3];

    helper_register_ordered(ledger, "audit");
    o = helper_ordered_new(conn, 2, 2);
    batch[0] = event_of(&o, 2, 1, 2);
    batch[1] = event_of(&o, 2, 0, 1);
    batch[2] = event_of(&o, 2, 1, 1);
    helper_claim_batch(ledger, batch, 3, claims);
    cr_assert_eq(claims[0].state, OBX_CLAIM_PARKED,
                 "B's 2 comes before its 1 in the batch: it waits (got %d)", claims[0].state);
    cr_assert_eq(claims[1].state, OBX_CLAIM_RUN, "A's 1 (got %d)", claims[1].state);
    cr_assert_eq(claims[2].state, OBX_CLAIM_RUN, "B's 1 (got %d)", claims[2].state);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 1);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[2]), 1, "B's 2 has not run");
    cr_assert_eq(helper_count(conn, "parked_events", "true"), 1);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}
