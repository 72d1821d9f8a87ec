/* SPDX-License-Identifier: MIT */
/*
 * test_ledger_order.c - per-aggregate order at the ledger (migration
 * 0017): an early event is parked (not run, not failed, kept with what it
 * needs to run later) and runs once its predecessor is done; the check
 * and the done mark meet on the handler's progress row, so a claim of n+1
 * waits for a batch holding n, and a park committed first is found by the
 * sweep after the done mark; two ledgers racing over shuffled deliveries
 * run every aggregate in order; skipped gaps are gone past; a handler
 * registered after an aggregate had events runs its next event at once;
 * unordered events take the plain claim; retention keeps the progress and
 * removes a parked copy only with its done ledger row.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
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

TestSuite(ledger_order, .init = setup, .fini = teardown, .timeout = 120);

static long long
parked(const char *handler, const char *event_id)
{
    char where[256];

    snprintf(where, sizeof(where), "handler = '%s' AND event_id = '%s'", handler, event_id);
    return helper_count(conn, "parked_events", where);
}

/* Takes the handler's ready parked events; returns how many, the first's id in `first`. */
static size_t
take_parked(struct obx_ledger *ledger, const char *handler, char first[37],
            struct obx_parked_set *set)
{
    outbox_error err;

    LEDGER_OK(obx_ledger_parked_take(ledger, handler, 100, 30, set, &err));
    if (set->count > 0 && first != NULL) {
        snprintf(first, 37, "%s", set->rows[0].event_id);
    }
    return set->count;
}

Test(ledger_order, an_early_event_is_parked_and_runs_once_its_predecessor_is_done)
{
    struct obx_ledger *ledger = helper_ledger_open("order-test");
    struct helper_ordered o;
    struct obx_claim early, first, again;
    struct obx_parked_set set;
    char ready[37] = "";
    outbox_error err;
    long long delays[1] = {-1};
    const struct obx_parked *rows[1];

    helper_register_ordered(ledger, "audit");
    o = helper_ordered_new(conn, 1, 3);
    early = helper_claim_one(ledger, "audit", &o.events[1], 30);
    cr_assert_eq(early.state, OBX_CLAIM_PARKED, "event 2 before event 1 must park, got %d",
                 early.state);
    cr_assert_eq(parked("audit", o.ids[1]), 1);
    cr_assert_eq(helper_count(conn, "processed_events", "true"), 0,
                 "a parked event is not claimed");
    cr_assert_eq(take_parked(ledger, "audit", NULL, &set), 0, "not ready while 1 is not done");
    obx_parked_set_fini(&set);

    first = helper_claim_one(ledger, "audit", &o.events[0], 30);
    cr_assert_eq(first.state, OBX_CLAIM_RUN);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 0, "claimed is not done");
    cr_assert_eq(helper_mark_done(ledger, "audit", &o.events[0], &first, 1), 1);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 1,
                 "the done mark moves the progress on");

    cr_assert_eq(take_parked(ledger, "audit", ready, &set), 1);
    cr_assert_str_eq(ready, o.ids[1]);
    cr_assert_str_eq(set.rows[0].envelope, o.envelopes[1], "the envelope is kept byte for byte");
    cr_assert_str_eq(set.rows[0].subject, "outbox.order.changed");
    again = helper_claim_one(ledger, "audit", &o.events[1], 30);
    cr_assert_eq(again.state, OBX_CLAIM_RUN);
    cr_assert_eq(helper_mark_done(ledger, "audit", &o.events[1], &again, 1), 1);
    rows[0] = &set.rows[0];
    LEDGER_OK(obx_ledger_parked_settle(ledger, "audit", rows, delays, 1, 0, &err));
    cr_assert_eq(parked("audit", o.ids[1]), 0, "the ack removes the parked row");
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 2);
    obx_parked_set_fini(&set);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}

/*
 * A transactional batch claimed as done (its handlers' effects commit with
 * the claims, or nothing does) runs an aggregate's numbers that follow on
 * without a gap, in batch order, in its one transaction.
 */
Test(ledger_order, a_transactional_batch_runs_a_gapless_run_in_one_transaction)
{
    struct obx_ledger *ledger = helper_ledger_open("order-test");
    struct helper_ordered o;
    struct obx_claim claims[3];
    outbox_error err;

    helper_register_ordered(ledger, "audit");
    o = helper_ordered_new(conn, 1, 3);
    LEDGER_OK(obx_ledger_begin(ledger, &err));
    LEDGER_OK(obx_ledger_claim_as_done(ledger, "audit", o.events, 3, 1000, claims, &err));
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(claims[i].state, OBX_CLAIM_RUN, "event %d of the run (got %d)", i + 1,
                     claims[i].state);
    }
    obx_ledger_rollback(ledger);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), -1,
                 "rolled back with the claim: no progress");
    cr_assert_eq(helper_count(conn, "processed_events", "true"), 0);

    LEDGER_OK(obx_ledger_begin(ledger, &err));
    LEDGER_OK(obx_ledger_claim_as_done(ledger, "audit", o.events, 3, 1000, claims, &err));
    LEDGER_OK(obx_ledger_commit(ledger, &err));
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 3,
                 "claimed as done: progress in the same commit");
    cr_assert_eq(helper_count(conn, "parked_events", "true"), 0);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}

/* The run must come in number order in the batch: its effects run in batch order. */
Test(ledger_order, a_run_out_of_batch_order_runs_its_first_and_parks_the_rest)
{
    struct obx_ledger *ledger = helper_ledger_open("order-test");
    struct helper_ordered o;
    struct obx_ledger_event batch[3];
    struct obx_claim claims[3];
    outbox_error err;

    helper_register_ordered(ledger, "audit");
    o = helper_ordered_new(conn, 1, 3);
    batch[0] = o.events[1];
    batch[1] = o.events[0];
    batch[2] = o.events[2];
    LEDGER_OK(obx_ledger_begin(ledger, &err));
    LEDGER_OK(obx_ledger_claim_as_done(ledger, "audit", batch, 3, 1000, claims, &err));
    LEDGER_OK(obx_ledger_commit(ledger, &err));
    cr_assert_eq(claims[0].state, OBX_CLAIM_PARKED, "2 came before 1 (got %d)", claims[0].state);
    cr_assert_eq(claims[1].state, OBX_CLAIM_RUN);
    cr_assert_eq(claims[2].state, OBX_CLAIM_PARKED, "3 follows a parked 2 (got %d)",
                 claims[2].state);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 1);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}

/* 1 if `event_id` is parked for `handler` with its message id, subject and envelope. */
static long long
parked_whole(const char *handler, const char *event_id)
{
    char where[512];

    snprintf(where, sizeof(where),
             "handler = '%s' AND event_id = '%s' AND message_id = '%s' "
             "AND subject = 'outbox.order.changed' "
             "AND envelope = (SELECT e.envelope::text FROM outbox.events AS e WHERE e.id = '%s')",
             handler, event_id, event_id, event_id);
    return helper_count(conn, "parked_events", where);
}

/* Aggregate `agg`'s three events of `o` as one batch out of order: [2, 1, 3]. */
static const struct obx_ledger_event *
batch_2_1_3(const struct helper_ordered *o, int agg, struct obx_ledger_event batch[3])
{
    const struct obx_ledger_event *e = &o->events[agg * 3];

    batch[0] = e[1];
    batch[1] = e[0];
    batch[2] = e[2];
    return e;
}

/* Events 2 and 3 of batch `agg` (`e`: its events in number order) parked whole. */
static void
expect_2_and_3_parked_whole(int agg, const struct obx_ledger_event *e)
{
    cr_assert_eq(parked_whole("audit", e[1].event_id), 1,
                 "batch %d: event 2 parked with its message id, subject and envelope", agg);
    cr_assert_eq(parked_whole("audit", e[2].event_id), 1,
                 "batch %d: event 3 parked with its message id, subject and envelope", agg);
}

/*
 * A claim in a transaction carries the events' messages only when the last
 * one parked some; either way, each event it parks is kept whole when the
 * transaction commits, and nothing is parked when it rolls back.
 */
Test(ledger_order, events_parked_in_a_transaction_are_kept_with_their_messages)
{
    struct obx_ledger *ledger = helper_ledger_open("order-test");
    struct helper_ordered o;
    struct obx_ledger_event batch[3];
    struct obx_claim claims[3];
    outbox_error err;

    helper_register_ordered(ledger, "audit");
    o = helper_ordered_new(conn, 3, 3);
    /* Three batches, one aggregate each, every one [2, 1, 3]: the first claim is made
     * without the messages (nothing parked before it), the next two with them. */
    for (int agg = 0; agg < 3; agg++) {
        const struct obx_ledger_event *e = batch_2_1_3(&o, agg, batch);

        LEDGER_OK(obx_ledger_begin(ledger, &err));
        LEDGER_OK(obx_ledger_claim_as_done(ledger, "audit", batch, 3, 1000, claims, &err));
        cr_assert_eq(claims[0].state, OBX_CLAIM_PARKED, "batch %d: 2 before 1 parks", agg);
        cr_assert_eq(claims[2].state, OBX_CLAIM_PARKED, "batch %d: 3 after a parked 2", agg);
        if (agg == 1) {
            obx_ledger_rollback(ledger);
            cr_assert_eq(parked("audit", e[1].event_id) + parked("audit", e[2].event_id), 0,
                         "rolled back: nothing parked");
            continue;
        }
        LEDGER_OK(obx_ledger_commit(ledger, &err));
        expect_2_and_3_parked_whole(agg, e);
    }
    cr_assert_eq(helper_count(conn, "parked_events", "true"), 4);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}

/*
 * Outside a transaction too: an ordered claim without the messages (none
 * parked before it) opens a transaction of its own, gives the events it
 * parks their messages, then commits; the claims after a park carry the
 * messages and commit alone. Every parked event is kept whole, and no
 * transaction is left open.
 */
Test(ledger_order, events_parked_by_a_claim_outside_a_transaction_are_kept_with_their_messages)
{
    struct obx_ledger *ledger = helper_ledger_open("order-test");
    struct helper_ordered o;
    struct obx_ledger_event batch[3];
    struct obx_claim claims[3];
    outbox_error err;

    helper_register_ordered(ledger, "audit");
    o = helper_ordered_new(conn, 3, 3);
    for (int agg = 0; agg < 3; agg++) {
        const struct obx_ledger_event *e = batch_2_1_3(&o, agg, batch);

        LEDGER_OK(obx_ledger_claim(ledger, "audit", batch, 3, 30, 1000, claims, &err));
        cr_assert_eq(claims[0].state, OBX_CLAIM_PARKED, "batch %d: 2 before 1 parks", agg);
        cr_assert_eq(claims[1].state, OBX_CLAIM_RUN, "batch %d: 1 runs", agg);
        cr_assert_eq(claims[2].state, OBX_CLAIM_PARKED, "batch %d: 3 after a parked 2", agg);
        cr_assert_eq(obx_ledger_txn_state(ledger), OBX_LEDGER_TXN_NONE,
                     "batch %d: the claim left no transaction open", agg);
        expect_2_and_3_parked_whole(agg, e);
        cr_assert_eq(helper_count(conn, "processed_events", "status = 'in_progress'"),
                     (long long)agg + 1, "batch %d: event 1's claim committed", agg);
    }
    cr_assert_eq(helper_count(conn, "parked_events", "true"), 6);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}

/* Claimed for runs one by one (each its own savepoint), only the next may run. */
Test(ledger_order, a_batch_claimed_for_separate_runs_runs_the_next_event_and_parks_the_rest)
{
    struct obx_ledger *ledger = helper_ledger_open("order-test");
    struct helper_ordered o;
    struct obx_claim claims[3];
    outbox_error err;

    helper_register_ordered(ledger, "audit");
    o = helper_ordered_new(conn, 1, 3);
    LEDGER_OK(obx_ledger_begin(ledger, &err));
    LEDGER_OK(obx_ledger_claim(ledger, "audit", o.events, 3, 30, 1000, claims, &err));
    LEDGER_OK(obx_ledger_commit(ledger, &err));
    cr_assert_eq(claims[0].state, OBX_CLAIM_RUN);
    cr_assert_eq(claims[1].state, OBX_CLAIM_PARKED);
    cr_assert_eq(claims[2].state, OBX_CLAIM_PARKED);
    cr_assert_eq(helper_count(conn, "parked_events", "true"), 2);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}

/*
 * The run's first may not run (another replica holds its claim): the
 * followers' claims, written as done, are taken back and they are parked.
 */
Test(ledger_order, followers_of_a_first_that_may_not_run_are_given_back_and_parked)
{
    struct obx_ledger *ledger = helper_ledger_open("order-test");
    struct obx_ledger *other = helper_ledger_open("order-other");
    struct helper_ordered o;
    struct obx_claim claims[3], held;
    outbox_error err;

    helper_register_ordered(ledger, "audit");
    o = helper_ordered_new(conn, 1, 3);
    held = helper_claim_one(other, "audit", &o.events[0], 30);
    cr_assert_eq(held.state, OBX_CLAIM_RUN);
    LEDGER_OK(obx_ledger_begin(ledger, &err));
    LEDGER_OK(obx_ledger_claim_as_done(ledger, "audit", o.events, 3, 1000, claims, &err));
    LEDGER_OK(obx_ledger_commit(ledger, &err));
    cr_assert_eq(claims[0].state, OBX_CLAIM_BUSY, "held elsewhere (got %d)", claims[0].state);
    cr_assert_eq(claims[1].state, OBX_CLAIM_PARKED, "got %d", claims[1].state);
    cr_assert_eq(claims[2].state, OBX_CLAIM_PARKED, "got %d", claims[2].state);
    cr_assert_eq(helper_count(conn, "processed_events", "status = 'done'"), 0,
                 "no follower is left done");
    cr_assert_eq(helper_count(conn, "parked_events", "true"), 2);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 0);
    helper_ordered_free(&o);
    obx_ledger_close(other);
    obx_ledger_close(ledger);
}

Test(ledger_order, the_claim_of_the_next_event_waits_for_the_batch_holding_its_predecessor)
{
    struct obx_ledger *a = helper_ledger_open("order-a");
    struct obx_ledger *b = helper_ledger_open("order-b");
    struct helper_ordered o;
    struct obx_claim first, second;
    outbox_error err;

    helper_register_ordered(a, "audit");
    o = helper_ordered_new(conn, 1, 2);
    LEDGER_OK(obx_ledger_begin(a, &err));
    LEDGER_OK(obx_ledger_claim_as_done(a, "audit", &o.events[0], 1, 1000, &first, &err));
    cr_assert_eq(first.state, OBX_CLAIM_RUN);
    LEDGER_OK(obx_ledger_claim(b, "audit", &o.events[1], 1, 30, 200, &second, &err));
    cr_assert_eq(second.state, OBX_CLAIM_BUSY, "the progress row is held: look again (got %d)",
                 second.state);
    cr_assert_eq(parked("audit", o.ids[1]), 0, "busy is not parked");
    LEDGER_OK(obx_ledger_commit(a, &err));
    second = helper_claim_one(b, "audit", &o.events[1], 30);
    cr_assert_eq(second.state, OBX_CLAIM_RUN, "once 1 is committed done, 2 runs");
    helper_ordered_free(&o);
    obx_ledger_close(b);
    obx_ledger_close(a);
}

/*
 * The careful path claims in progress inside its transaction. A claim of
 * an event that may run takes no lock on the progress (migration 0030):
 * the next event's claim sees its predecessor claimed, not done, and parks
 * it under that lock. The finisher's done mark writes the same row, so it
 * waits for that park to commit, and its sweep after its own commit finds
 * the park at once, not a periodic sweep later.
 */
Test(ledger_order, a_park_beside_a_careful_claim_is_found_by_the_finishers_sweep)
{
    struct obx_ledger *a = helper_ledger_open("order-a");
    struct obx_ledger *b = helper_ledger_open("order-b");
    struct helper_ordered o;
    struct obx_claim first, second;
    struct obx_parked_set set;
    char ready[37] = "";
    size_t marked = 0;
    outbox_error err;

    helper_register_ordered(a, "audit");
    o = helper_ordered_new(conn, 1, 3);
    /* Event 1 done: the progress row exists, committed (no insert to wait on). */
    first = helper_claim_one(a, "audit", &o.events[0], 30);
    cr_assert_eq(helper_mark_done(a, "audit", &o.events[0], &first, 1), 1);
    LEDGER_OK(obx_ledger_begin(a, &err));
    LEDGER_OK(obx_ledger_claim(a, "audit", &o.events[1], 1, 30, 1000, &first, &err));
    cr_assert_eq(first.state, OBX_CLAIM_RUN);
    LEDGER_OK(obx_ledger_claim(b, "audit", &o.events[2], 1, 30, 200, &second, &err));
    cr_assert_eq(second.state, OBX_CLAIM_PARKED, "2 is claimed, not done: 3 parks (got %d)",
                 second.state);
    LEDGER_OK(obx_ledger_mark_done(a, "audit", &o.events[1], &first, 1, &marked, &err));
    cr_assert_eq(marked, 1);
    LEDGER_OK(obx_ledger_commit(a, &err));
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 2);
    cr_assert_eq(take_parked(a, "audit", ready, &set), 1, "the finisher's sweep finds it");
    cr_assert_str_eq(ready, o.ids[2]);
    obx_parked_set_fini(&set);
    second = helper_claim_one(b, "audit", &o.events[2], 30);
    cr_assert_eq(second.state, OBX_CLAIM_RUN);
    helper_ordered_free(&o);
    obx_ledger_close(b);
    obx_ledger_close(a);
}

/*
 * A claim whose events may all run reads the progress without its lock
 * (migration 0030): a park of a later event, holding the row until its
 * transaction ends, does not make the ready event wait or come back busy.
 */
Test(ledger_order, a_ready_event_runs_while_another_claim_holds_its_progress_row)
{
    struct obx_ledger *a = helper_ledger_open("order-a");
    struct obx_ledger *b = helper_ledger_open("order-b");
    struct helper_ordered o;
    struct obx_claim first, later, next;
    outbox_error err;

    helper_register_ordered(a, "audit");
    o = helper_ordered_new(conn, 1, 3);
    first = helper_claim_one(a, "audit", &o.events[0], 30);
    cr_assert_eq(helper_mark_done(a, "audit", &o.events[0], &first, 1), 1);
    LEDGER_OK(obx_ledger_begin(a, &err));
    LEDGER_OK(obx_ledger_claim(a, "audit", &o.events[2], 1, 30, 1000, &later, &err));
    cr_assert_eq(later.state, OBX_CLAIM_PARKED, "3 is early: parked, the row locked");
    LEDGER_OK(obx_ledger_claim(b, "audit", &o.events[1], 1, 30, 200, &next, &err));
    cr_assert_eq(next.state, OBX_CLAIM_RUN, "2 may run: the held row is not waited for (got %d)",
                 next.state);
    LEDGER_OK(obx_ledger_commit(a, &err));
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 1, "claimed is not done");
    helper_ordered_free(&o);
    obx_ledger_close(b);
    obx_ledger_close(a);
}

/*
 * The same ready event claimed by two replicas at once, the first's claim
 * not yet committed: the second's plain insert waits for that row up to
 * its lock wait, then the event is busy (not an error, not run twice).
 */
Test(ledger_order, a_ready_event_another_open_claim_is_inserting_is_busy)
{
    struct obx_ledger *a = helper_ledger_open("order-a");
    struct obx_ledger *b = helper_ledger_open("order-b");
    struct helper_ordered o;
    struct obx_claim first, second;
    outbox_error err;

    helper_register_ordered(a, "audit");
    o = helper_ordered_new(conn, 1, 1);
    LEDGER_OK(obx_ledger_begin(a, &err));
    LEDGER_OK(obx_ledger_claim(a, "audit", &o.events[0], 1, 30, 1000, &first, &err));
    cr_assert_eq(first.state, OBX_CLAIM_RUN);
    LEDGER_OK(obx_ledger_claim(b, "audit", &o.events[0], 1, 30, 200, &second, &err));
    cr_assert_eq(second.state, OBX_CLAIM_BUSY, "held by an open claim: look again (got %d)",
                 second.state);
    LEDGER_OK(obx_ledger_commit(a, &err));
    second = helper_claim_one(b, "audit", &o.events[0], 30);
    cr_assert_eq(second.state, OBX_CLAIM_BUSY, "claimed by the first, its lease running");
    cr_assert_eq(helper_count(conn, "processed_events", "status = 'in_progress'"), 1);
    helper_ordered_free(&o);
    obx_ledger_close(b);
    obx_ledger_close(a);
}

Test(ledger_order, a_park_committed_before_the_done_mark_is_ready_for_the_sweep_after_it)
{
    struct obx_ledger *a = helper_ledger_open("order-a");
    struct obx_ledger *b = helper_ledger_open("order-b");
    struct helper_ordered o;
    struct obx_claim first, second;
    struct obx_parked_set set;
    char ready[37] = "";

    helper_register_ordered(a, "audit");
    o = helper_ordered_new(conn, 1, 2);
    first = helper_claim_one(a, "audit", &o.events[0], 30); /* external: committed at once */
    cr_assert_eq(first.state, OBX_CLAIM_RUN);
    second = helper_claim_one(b, "audit", &o.events[1], 30);
    cr_assert_eq(second.state, OBX_CLAIM_PARKED, "1 is claimed, not done: 2 parks");
    cr_assert_eq(helper_mark_done(a, "audit", &o.events[0], &first, 1), 1);
    cr_assert_eq(take_parked(a, "audit", ready, &set), 1, "the finisher's sweep finds it");
    cr_assert_str_eq(ready, o.ids[1]);
    obx_parked_set_fini(&set);
    helper_ordered_free(&o);
    obx_ledger_close(b);
    obx_ledger_close(a);
}

/*
 * An external claim (exec:, http:) of an aggregate's first event writes no
 * progress row (0031): the done mark makes it, at the number it marks
 * done, and the aggregate's next event then runs. The previous release's
 * consumers call ledger_claim_ordered() without its last argument: their
 * claim still makes the row at 0, which their done mark (an update) needs
 * during a rolling upgrade.
 */
Test(ledger_order, a_first_events_progress_row_is_made_by_its_done_mark)
{
    struct obx_ledger *a = helper_ledger_open("order-a");
    struct helper_ordered o;
    struct obx_claim first, next;
    char sql[512];

    helper_register_ordered(a, "audit");
    o = helper_ordered_new(conn, 2, 2);
    first = helper_claim_one(a, "audit", &o.events[0], 30);
    cr_assert_eq(first.state, OBX_CLAIM_RUN);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), -1, "the claim wrote a progress row");
    cr_assert_eq(helper_mark_done(a, "audit", &o.events[0], &first, 1), 1);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 1, "the done mark made the row at 1");
    next = helper_claim_one(a, "audit", &o.events[1], 30);
    cr_assert_eq(next.state, OBX_CLAIM_RUN, "2 runs once 1 is done (got %d)", next.state);

    snprintf(sql, sizeof(sql),
             "SELECT string_agg(state, ',') FROM outbox.ledger_claim_ordered('audit', "
             "ARRAY['%s']::uuid[], 30, 1000, false, ARRAY['order'], ARRAY['%s']::uuid[], "
             "ARRAY[1::bigint], NULL, NULL, NULL)",
             o.ids[2], o.aggs[2]);
    {
        char *states = harness_scalar_text(conn, sql);

        cr_assert_str_eq(states, "run");
        free(states);
    }
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[2]), 0,
                 "a claim without the last argument makes the row at 0");
    helper_ordered_free(&o);
    obx_ledger_close(a);
}

Test(ledger_order, a_skipped_gap_is_gone_past)
{
    struct obx_ledger *ledger = helper_ledger_open("order-test");
    struct helper_ordered o;
    struct obx_claim c;
    struct obx_parked_set set;
    char sql[512], ready[37] = "";

    helper_register_ordered(ledger, "audit");
    o = helper_ordered_new(conn, 1, 4);
    c = helper_claim_one(ledger, "audit", &o.events[0], 30);
    cr_assert_eq(helper_mark_done(ledger, "audit", &o.events[0], &c, 1), 1);
    cr_assert_eq(helper_claim_one(ledger, "audit", &o.events[3], 30).state, OBX_CLAIM_PARKED);
    /* An operator skips 2 (dead skip): 3 may run, 4 still waits for 3. */
    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox.aggregate_skips (aggregate_type, aggregate_id, aggregate_seq, "
             "event_id) VALUES ('order', '%s', 2, '%s')",
             o.aggs[1], o.ids[1]);
    harness_exec(conn, sql);
    cr_assert_eq(take_parked(ledger, "audit", NULL, &set), 0, "4 waits for 3");
    obx_parked_set_fini(&set);
    c = helper_claim_one(ledger, "audit", &o.events[2], 30);
    cr_assert_eq(c.state, OBX_CLAIM_RUN, "2 is skipped: 3 runs after 1 (got %d)", c.state);
    cr_assert_eq(helper_mark_done(ledger, "audit", &o.events[2], &c, 1), 1);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 3);
    /* 3 is done: the parked 4 is ready for a sweep. */
    cr_assert_eq(take_parked(ledger, "audit", ready, &set), 1);
    cr_assert_str_eq(ready, o.ids[3]);
    obx_parked_set_fini(&set);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}

Test(ledger_order, two_skipped_numbers_in_a_row_are_gone_past)
{
    struct obx_ledger *ledger = helper_ledger_open("order-test");
    struct helper_ordered o;
    struct obx_claim c;
    char sql[512];

    helper_register_ordered(ledger, "audit");
    o = helper_ordered_new(conn, 1, 4);
    c = helper_claim_one(ledger, "audit", &o.events[0], 30);
    cr_assert_eq(helper_mark_done(ledger, "audit", &o.events[0], &c, 1), 1);
    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox.aggregate_skips (aggregate_type, aggregate_id, aggregate_seq, "
             "event_id) VALUES ('order', '%s', 2, '%s'), ('order', '%s', 3, '%s')",
             o.aggs[1], o.ids[1], o.aggs[2], o.ids[2]);
    harness_exec(conn, sql);
    c = helper_claim_one(ledger, "audit", &o.events[3], 30);
    cr_assert_eq(c.state, OBX_CLAIM_RUN, "2 and 3 skipped: 4 runs after 1 (got %d)", c.state);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}

Test(ledger_order, a_handler_registered_after_an_aggregate_had_events_runs_its_next_at_once)
{
    struct obx_ledger *ledger = helper_ledger_open("order-test");
    struct helper_ordered o =
        helper_ordered_new(conn, 1, 3); /* written, and published, before the handler existed */
    struct obx_claim c;
    char sql[256];

    harness_exec(conn, "UPDATE outbox.events SET status = 'done', published_at = now()");
    helper_register_ordered(ledger, "late");
    cr_assert_eq(helper_progress(conn, "late", o.aggs[0]), 3,
                 "its order starts after what was written");
    c = helper_claim_one(ledger, "late", &o.events[2], 30);
    cr_assert_eq(c.state, OBX_CLAIM_RUN, "event 3 must not wait for 1 and 2 (got %d)", c.state);
    cr_assert_eq(helper_mark_done(ledger, "late", &o.events[2], &c, 1), 1);
    c = helper_claim_one(ledger, "late", &o.events[0], 30);
    cr_assert_eq(c.state, OBX_CLAIM_RUN, "an older event, if given, runs once too");
    /* What is written after the registration is in order. */
    snprintf(sql, sizeof(sql),
             "SELECT count(outbox.enqueue('order', '%s', 'changed', '{}')) "
             "FROM generate_series(1, 2)",
             o.aggs[0]);
    cr_assert_eq(harness_scalar_ll(conn, sql), 2);
    helper_ordered_free(&o);
    o = helper_ordered_new(conn, 0, 0);
    cr_assert_eq(o.count, 5);
    cr_assert_eq(helper_claim_one(ledger, "late", &o.events[4], 30).state, OBX_CLAIM_PARKED,
                 "5 waits for 4");
    cr_assert_eq(helper_claim_one(ledger, "late", &o.events[3], 30).state, OBX_CLAIM_RUN);
    /* Registering again changes nothing: the baseline is taken once. */
    helper_register_ordered(ledger, "late");
    cr_assert_eq(helper_progress(conn, "late", o.aggs[0]), 3);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}

Test(ledger_order, a_handler_never_registered_takes_its_baseline_at_its_first_ordered_claim)
{
    struct obx_ledger *ledger = helper_ledger_open("order-test");
    struct helper_ordered o = helper_ordered_new(conn, 1, 2);
    struct obx_claim c;

    harness_exec(conn, "UPDATE outbox.events SET status = 'done', published_at = now()");
    c = helper_claim_one(ledger, "unregistered", &o.events[1], 30);
    cr_assert_eq(c.state, OBX_CLAIM_RUN, "not parked for ever (got %d)", c.state);
    cr_assert_eq(helper_count(conn, "handler_baselines", "handler = 'unregistered'"), 1);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}

/*
 * Events still in the outbox when a handler starts will be given to it, so
 * its order starts before them: the first unpublished one (a dead head,
 * say) is waited for, and what was published before it is not.
 */
Test(ledger_order, a_handler_starting_while_events_wait_in_the_outbox_waits_for_them)
{
    struct obx_ledger *ledger = helper_ledger_open("order-test");
    struct helper_ordered o = helper_ordered_new(conn, 1, 4);
    struct obx_claim c;
    char sql[256];

    snprintf(sql, sizeof(sql),
             "UPDATE outbox.events SET status = 'done', published_at = now() WHERE id = '%s'",
             o.ids[0]);
    harness_exec(conn, sql);
    snprintf(sql, sizeof(sql), "UPDATE outbox.events SET status = 'dead' WHERE id = '%s'",
             o.ids[1]);
    harness_exec(conn, sql);
    helper_register_ordered(ledger, "late");
    cr_assert_eq(helper_progress(conn, "late", o.aggs[0]), 1,
                 "its order starts before the dead head");
    c = helper_claim_one(ledger, "late", &o.events[2], 30);
    cr_assert_eq(c.state, OBX_CLAIM_PARKED, "3 waits for the dead 2 (got %d)", c.state);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}

Test(ledger_order, unordered_events_take_the_plain_claim_and_done_mark)
{
    struct obx_ledger *ledger = helper_ledger_open("order-test");
    struct helper_events ev;
    struct obx_claim *claims;

    harness_exec(conn,
                 "SELECT count(outbox.enqueue('movie', '00000000-0000-0000-0000-000000000000', "
                 "'review.logged', '{}')) FROM generate_series(1, 3)");
    ev = helper_events_new(conn, 0);
    cr_assert_eq(ev.count, 3);
    cr_assert_eq(helper_count(conn, "events", "aggregate_seq IS NOT NULL"), 0);
    claims = helper_claim(ledger, "audit", ev.events, ev.count, 30);
    for (size_t i = 0; i < ev.count; i++) {
        cr_assert_eq(claims[i].state, OBX_CLAIM_RUN);
    }
    cr_assert_eq(helper_mark_done(ledger, "audit", ev.events, claims, ev.count), 3);
    /* The ordered claim would have taken the handler's baseline: it never ran. */
    cr_assert_eq(helper_count(conn, "handler_baselines", "true"), 0);
    cr_assert_eq(helper_count(conn, "handler_progress", "true"), 0);
    free(claims);
    helper_events_free(&ev);
    obx_ledger_close(ledger);
}

Test(ledger_order, retention_keeps_the_progress_and_takes_a_parked_copy_only_with_its_done_row)
{
    struct obx_ledger *ledger = helper_ledger_open("order-test");
    struct helper_ordered o;
    struct obx_claim c;
    struct obx_prune_cursor cursor = {{0}};
    size_t deleted = 0;
    outbox_error err;

    helper_register_ordered(ledger, "audit");
    o = helper_ordered_new(conn, 1, 3);
    cr_assert_eq(helper_claim_one(ledger, "audit", &o.events[1], 30).state, OBX_CLAIM_PARKED);
    cr_assert_eq(helper_claim_one(ledger, "audit", &o.events[2], 30).state, OBX_CLAIM_PARKED);
    c = helper_claim_one(ledger, "audit", &o.events[0], 30);
    cr_assert_eq(helper_mark_done(ledger, "audit", &o.events[0], &c, 1), 1);
    c = helper_claim_one(ledger, "audit", &o.events[1], 30);
    cr_assert_eq(c.state, OBX_CLAIM_RUN);
    cr_assert_eq(helper_mark_done(ledger, "audit", &o.events[1], &c, 1), 1);
    /* 2 is done but its parked copy stayed (an ack lost); 3 is still parked. */
    harness_exec(conn,
                 "UPDATE outbox.processed_events SET finished_at = now() - interval '2 days'");
    harness_sleep_ms(1100); /* the events' UUIDv7 ids must be older than the 1 s retention */
    LEDGER_OK(obx_ledger_prune(ledger, 1, 100, &cursor, &deleted, &err));
    cr_assert_eq(deleted, 2);
    cr_assert_eq(parked("audit", o.ids[1]), 0, "the done event's parked copy goes with its row");
    cr_assert_eq(parked("audit", o.ids[2]), 1, "a parked event not yet run stays");
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 2,
                 "the progress is the order's memory: kept");
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}

/*
 * Two replicas, each its own ledger, get every event of 20 aggregates once,
 * in a shuffled order (the feed keeps no order), and run them like the
 * consumer: external claim, effect, done, then a sweep of what became
 * ready. The effects must be each aggregate's events in seq order, each once.
 */
enum { RACE_AGGS = 20, RACE_PER = 15 };

struct race {
    struct helper_ordered *o;
    size_t *order;
    atomic_size_t next;
    atomic_long effects;
};

static void
race_effect(PGconn *db, const struct obx_ledger_event *e)
{
    char sql[256];
    PGresult *res;

    snprintf(sql, sizeof(sql), "INSERT INTO public.effects (aggregate_id, seq) VALUES ('%s', %lld)",
             e->aggregate_id, e->aggregate_seq);
    res = PQexec(db, sql);
    PQclear(res);
}

/* Claim, effect, done for one event; 1 if it ran. */
static int
race_run(struct obx_ledger *ledger, PGconn *db, const struct obx_ledger_event *e)
{
    struct obx_claim c;
    size_t marked = 0;
    outbox_error err;

    if (obx_ledger_claim(ledger, "race", e, 1, 30, 1000, &c, &err) != OUTBOX_OK ||
        c.state != OBX_CLAIM_RUN) {
        return 0;
    }
    race_effect(db, e);
    return obx_ledger_mark_done(ledger, "race", e, &c, 1, &marked, &err) == OUTBOX_OK && marked;
}

static const struct obx_ledger_event *
race_find(struct race *r, const char *id)
{
    for (size_t i = 0; i < r->o->count; i++) {
        if (strcmp(r->o->ids[i], id) == 0) {
            return &r->o->events[i];
        }
    }
    return NULL;
}

static void
race_sweep(struct race *r, struct obx_ledger *ledger, PGconn *db)
{
    for (;;) {
        struct obx_parked_set set;
        long long *delays;
        const struct obx_parked **rows;
        outbox_error err;

        if (obx_ledger_parked_take(ledger, "race", 50, 30, &set, &err) != OUTBOX_OK ||
            set.count == 0) {
            obx_parked_set_fini(&set);
            return;
        }
        delays = calloc(set.count, sizeof(*delays));
        rows = calloc(set.count, sizeof(*rows));
        for (size_t i = 0; i < set.count; i++) {
            const struct obx_ledger_event *e = race_find(r, set.rows[i].event_id);
            struct obx_claim c;

            rows[i] = &set.rows[i];
            delays[i] = -1;
            if (e != NULL &&
                obx_ledger_claim(ledger, "race", e, 1, 30, 1000, &c, &err) == OUTBOX_OK) {
                size_t marked = 0;

                if (c.state == OBX_CLAIM_RUN) {
                    race_effect(db, e);
                    obx_ledger_mark_done(ledger, "race", e, &c, 1, &marked, &err);
                } else if (c.state == OBX_CLAIM_BUSY) {
                    delays[i] = 0;
                }
            }
        }
        obx_ledger_parked_settle(ledger, "race", rows, delays, set.count, 0, &err);
        free(rows);
        free(delays);
        obx_parked_set_fini(&set);
    }
}

static void *
race_replica(void *arg)
{
    struct race *r = arg;
    struct obx_store_options opts = {
        .conninfo = harness_db_url(), .schema = "outbox", .application_name = "race"};
    struct obx_ledger *ledger = NULL;
    PGconn *db = PQconnectdb(harness_db_url());
    outbox_error err;
    size_t k;

    if (obx_ledger_open(&opts, &ledger, &err) != OUTBOX_OK) {
        PQfinish(db);
        return NULL;
    }
    while ((k = atomic_fetch_add(&r->next, 1)) < r->o->count) {
        race_run(ledger, db, &r->o->events[r->order[k]]);
        race_sweep(r, ledger, db);
    }
    /* The last sweeps: what the other replica's done marks readied. */
    for (int i = 0;
         i < 50 && harness_scalar_ll(db, "SELECT count(*) FROM outbox.parked_events") > 0; i++) {
        race_sweep(r, ledger, db);
        harness_sleep_ms(20);
    }
    obx_ledger_close(ledger);
    PQfinish(db);
    return NULL;
}

Test(ledger_order, two_ledgers_racing_over_shuffled_deliveries_run_every_aggregate_in_order)
{
    struct obx_ledger *ledger = helper_ledger_open("order-test");
    struct helper_ordered o;
    struct race r = {0};
    pthread_t t[2];
    unsigned int seed = 42;

    harness_exec(conn, "CREATE TABLE public.effects (n bigserial PRIMARY KEY, aggregate_id uuid, "
                       "seq bigint)");
    helper_register_ordered(ledger, "race");
    o = helper_ordered_new(conn, RACE_AGGS, RACE_PER);
    r.o = &o;
    r.order = calloc(o.count, sizeof(*r.order));
    for (size_t i = 0; i < o.count; i++) {
        r.order[i] = i;
    }
    for (size_t i = o.count - 1; i > 0; i--) { /* a feed that keeps no order */
        size_t j = (size_t)rand_r(&seed) % (i + 1), x = r.order[i];

        r.order[i] = r.order[j];
        r.order[j] = x;
    }
    pthread_create(&t[0], NULL, race_replica, &r);
    pthread_create(&t[1], NULL, race_replica, &r);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM public.effects"),
                 RACE_AGGS * RACE_PER, "every event ran once");
    cr_assert_eq(harness_scalar_ll(conn,
                                   "SELECT count(*) FROM (SELECT aggregate_id, seq "
                                   "FROM public.effects GROUP BY 1, 2 HAVING count(*) > 1) d"),
                 0, "none twice");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM (SELECT seq, row_number() OVER "
                                         "(PARTITION BY aggregate_id ORDER BY n) AS k "
                                         "FROM public.effects) e WHERE seq <> k"),
                 0, "each aggregate's effects in seq order");
    cr_assert_eq(helper_count(conn, "parked_events", "true"), 0);
    free(r.order);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}
