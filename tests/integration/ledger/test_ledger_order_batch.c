/* SPDX-License-Identifier: MIT */
/*
 * test_ledger_order_batch.c - the order check of a transactional batch
 * with several aggregates (migration 0019 sorts a batch out in one
 * statement and leaves only an aggregate whose run meets a gap to the
 * per-event check): a run stops at a gap no skip closes, goes past skipped
 * numbers, starts after a skipped head, leaves a redelivered event below
 * the progress to the plain claim, and two replicas claiming shuffled
 * batches in transactions (effects in the same transaction) run every
 * aggregate in order, each event once. Migration 0021's one write: a
 * progress row moved or made between its unlocked read and the write is
 * decided again under its lock, and a run that breaks sets it back.
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

TestSuite(ledger_order_batch, .init = setup, .fini = teardown, .timeout = 180);

/* Records number `seq` of `agg` as skipped for every handler (as `outboxctl dead skip`). */
static void
skip(const struct helper_ordered *o, size_t event)
{
    char sql[512];

    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox.aggregate_skips (aggregate_type, aggregate_id, aggregate_seq, "
             "event_id) VALUES ('order', '%s', %lld, '%s')",
             o->aggs[event], o->events[event].aggregate_seq, o->ids[event]);
    harness_exec(conn, sql);
}

/*
 * Aggregate A (events 0-3 of `o`: numbers 1-4) comes as 1, 2, 4; aggregate B
 * (events 4-5: 1, 2) in the same batch. No skip: A's run stops at the gap,
 * 4 is parked, B runs whole.
 */
Test(ledger_order_batch, a_run_stops_at_a_gap_no_skip_closes)
{
    struct obx_ledger *ledger = helper_ledger_open("order-batch");
    struct helper_ordered o;
    struct obx_ledger_event batch[5];
    struct obx_claim claims[5];

    helper_register_ordered(ledger, "audit");
    o = helper_ordered_new(conn, 2, 4);
    batch[0] = o.events[0];
    batch[1] = o.events[4];
    batch[2] = o.events[1];
    batch[3] = o.events[5];
    batch[4] = o.events[3];
    helper_claim_batch(ledger, batch, 5, claims);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(claims[i].state, OBX_CLAIM_RUN, "batch[%d] (got %d)", i, claims[i].state);
    }
    cr_assert_eq(claims[4].state, OBX_CLAIM_PARKED, "4 after 2 with 3 not done (got %d)",
                 claims[4].state);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 2);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[4]), 2);
    cr_assert_eq(helper_count(conn, "processed_events", "true"), 4, "the parked 4 is not claimed");
    cr_assert_eq(helper_count(conn, "parked_events", "true"), 1);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}

/* The same batch with 3 skipped: A's run goes past it, 1, 2, 4 run in the one transaction. */
Test(ledger_order_batch, a_run_goes_past_a_skipped_number)
{
    struct obx_ledger *ledger = helper_ledger_open("order-batch");
    struct helper_ordered o;
    struct obx_ledger_event batch[5];
    struct obx_claim claims[5];

    helper_register_ordered(ledger, "audit");
    o = helper_ordered_new(conn, 2, 4);
    skip(&o, 2);
    batch[0] = o.events[0];
    batch[1] = o.events[4];
    batch[2] = o.events[1];
    batch[3] = o.events[5];
    batch[4] = o.events[3];
    helper_claim_batch(ledger, batch, 5, claims);
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(claims[i].state, OBX_CLAIM_RUN, "batch[%d] (got %d)", i, claims[i].state);
    }
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 4, "3 is skipped: the run ends at 4");
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[4]), 2);
    cr_assert_eq(helper_count(conn, "parked_events", "true"), 0);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}

/* A's 1 is skipped and its batch starts at 2, with 3 behind it; B starts at 2 with 1 not done. */
Test(ledger_order_batch, a_run_starts_after_a_skipped_head_and_only_there)
{
    struct obx_ledger *ledger = helper_ledger_open("order-batch");
    struct helper_ordered o;
    struct obx_ledger_event batch[4];
    struct obx_claim claims[4];

    helper_register_ordered(ledger, "audit");
    o = helper_ordered_new(conn, 2, 3);
    skip(&o, 0);
    batch[0] = o.events[1];
    batch[1] = o.events[4];
    batch[2] = o.events[2];
    batch[3] = o.events[5];
    helper_claim_batch(ledger, batch, 4, claims);
    cr_assert_eq(claims[0].state, OBX_CLAIM_RUN, "1 skipped: 2 is A's next (got %d)",
                 claims[0].state);
    cr_assert_eq(claims[2].state, OBX_CLAIM_RUN, "3 follows 2 (got %d)", claims[2].state);
    cr_assert_eq(claims[1].state, OBX_CLAIM_PARKED, "B's 1 is not done (got %d)", claims[1].state);
    cr_assert_eq(claims[3].state, OBX_CLAIM_PARKED, "got %d", claims[3].state);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 3);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[3]), 0);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}

/* 1 and 2 done; 2 comes again with 3 and 4: the plain claim says done, 3 and 4 run. */
Test(ledger_order_batch, a_redelivered_event_below_the_progress_leaves_the_run_to_the_next)
{
    struct obx_ledger *ledger = helper_ledger_open("order-batch");
    struct helper_ordered o;
    struct obx_claim claims[3];

    helper_register_ordered(ledger, "audit");
    o = helper_ordered_new(conn, 1, 4);
    helper_claim_batch(ledger, o.events, 2, claims);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 2);
    helper_claim_batch(ledger, &o.events[1], 3, claims);
    cr_assert_eq(claims[0].state, OBX_CLAIM_DONE, "2 is done already (got %d)", claims[0].state);
    cr_assert_eq(claims[1].state, OBX_CLAIM_RUN, "got %d", claims[1].state);
    cr_assert_eq(claims[2].state, OBX_CLAIM_RUN, "got %d", claims[2].state);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), 4);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}

/*
 * Two replicas, each its own ledger, take shuffled batches of 7 events
 * (the feed keeps no order, so a batch holds numbers of one aggregate out
 * of order, with gaps, and beside the other replica's batch holding n - 1
 * or n + 1) and run them like the transactional consumer: claim as done,
 * an effect per RUN claim in batch order in the same transaction, commit;
 * busy ones again later; then a sweep runs what became ready, as batches
 * too. The effects must be each aggregate's events in number order, each
 * once.
 */
enum { RACE_AGGS = 12, RACE_PER = 20, RACE_BATCH = 7 };

struct race {
    struct helper_ordered *o;
    size_t *order;
    atomic_size_t next;
    atomic_int failures; /* a replica thread counts what went wrong; the test asserts it */
};

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

/*
 * One transaction: claims, then an effect per RUN claim in batch order;
 * busy[i] set if busy. 0, or -1 if a step failed (run in a replica's
 * thread, so it reports instead of asserting).
 */
static int
race_batch(struct obx_ledger *ledger, const struct obx_ledger_event *batch, size_t n, int *busy)
{
    struct obx_claim claims[64];
    PGconn *db = obx_ledger_connection(ledger);
    outbox_error err;
    int failed = 0;

    if (n > 64 || obx_ledger_begin(ledger, &err) != OUTBOX_OK) {
        return -1;
    }
    if (obx_ledger_claim_as_done(ledger, "race", batch, n, 1000, claims, &err) != OUTBOX_OK) {
        obx_ledger_rollback(ledger);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        busy[i] = claims[i].state == OBX_CLAIM_BUSY;
        if (claims[i].state == OBX_CLAIM_RUN) {
            char sql[256];
            PGresult *res;

            snprintf(sql, sizeof(sql),
                     "INSERT INTO public.effects (aggregate_id, seq) VALUES ('%s', %lld)",
                     batch[i].aggregate_id, batch[i].aggregate_seq);
            res = PQexec(db, sql);
            failed |= PQresultStatus(res) != PGRES_COMMAND_OK;
            PQclear(res);
        }
    }
    if (failed || obx_ledger_commit(ledger, &err) != OUTBOX_OK) {
        obx_ledger_rollback(ledger);
        return -1;
    }
    return 0;
}

/* Runs the ready parked events as batches until none is left to take now. */
static void
race_sweep(struct race *r, struct obx_ledger *ledger)
{
    for (;;) {
        struct obx_parked_set set;
        struct obx_ledger_event batch[64];
        long long delays[64];
        const struct obx_parked *rows[64];
        int busy[64] = {0};
        outbox_error err;
        size_t n = 0;

        if (obx_ledger_parked_take(ledger, "race", RACE_BATCH, 30, &set, &err) != OUTBOX_OK ||
            set.count == 0) {
            obx_parked_set_fini(&set);
            return;
        }
        for (size_t i = 0; i < set.count; i++) {
            const struct obx_ledger_event *e = race_find(r, set.rows[i].event_id);

            if (e == NULL) {
                r->failures++;
                continue;
            }
            batch[n] = *e;
            rows[n++] = &set.rows[i];
        }
        if (race_batch(ledger, batch, n, busy) != 0) {
            r->failures++;
        }
        for (size_t i = 0; i < n; i++) {
            delays[i] = busy[i] ? 0 : -1;
        }
        obx_ledger_parked_settle(ledger, "race", rows, delays, n, 0, &err);
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
    struct obx_ledger_event *again = calloc(r->o->count + 1, sizeof(*again));
    size_t waiting = 0;
    PGconn *db = PQconnectdb(harness_db_url());
    outbox_error err;

    if (again == NULL || obx_ledger_open(&opts, &ledger, &err) != OUTBOX_OK) {
        r->failures++;
        free(again);
        PQfinish(db);
        return NULL;
    }
    for (;;) {
        size_t k = atomic_fetch_add(&r->next, RACE_BATCH);
        struct obx_ledger_event batch[RACE_BATCH];
        int busy[RACE_BATCH] = {0};
        size_t n = 0;

        if (k >= r->o->count) {
            break;
        }
        for (; n < RACE_BATCH && k + n < r->o->count; n++) {
            batch[n] = r->o->events[r->order[k + n]];
        }
        if (race_batch(ledger, batch, n, busy) != 0) {
            r->failures++;
        }
        for (size_t i = 0; i < n; i++) {
            if (busy[i]) {
                again[waiting++] = batch[i]; /* naked: delivered again below */
            }
        }
        race_sweep(r, ledger);
    }
    /* Busy ones delivered again, then the last sweeps: what the other replica's commits readied. */
    for (int i = 0; i < 200 && (waiting > 0 || harness_scalar_ll(db, "SELECT count(*) FROM "
                                                                     "outbox.parked_events") > 0);
         i++) {
        size_t left = 0;

        for (size_t j = 0; j < waiting; j++) {
            int busy = 0;

            if (race_batch(ledger, &again[j], 1, &busy) != 0) {
                r->failures++;
            }
            if (busy) {
                again[left++] = again[j];
            }
        }
        waiting = left;
        race_sweep(r, ledger);
        harness_sleep_ms(20);
    }
    r->failures += waiting > 0; /* a busy event never ran */
    free(again);
    obx_ledger_close(ledger);
    PQfinish(db);
    return NULL;
}

Test(ledger_order_batch, two_replicas_racing_over_shuffled_batches_run_every_aggregate_in_order)
{
    struct obx_ledger *ledger = helper_ledger_open("order-batch");
    struct helper_ordered o;
    struct race r = {0};
    pthread_t t[2];
    unsigned int seed = 7;

    harness_exec(conn, "CREATE TABLE public.effects (n bigserial PRIMARY KEY, aggregate_id uuid, "
                       "seq bigint)");
    helper_register_ordered(ledger, "race");
    o = helper_ordered_new(conn, RACE_AGGS, RACE_PER);
    r.o = &o;
    r.order = calloc(o.count, sizeof(*r.order));
    cr_assert(r.order != NULL);
    for (size_t i = 0; i < o.count; i++) {
        r.order[i] = i;
    }
    /* Mostly in order, as relays publish from the head, with swaps a few places apart. */
    for (size_t i = 0; i + 1 < o.count; i++) {
        size_t j = i + (size_t)rand_r(&seed) % 9, x;

        if (j < o.count && rand_r(&seed) % 3 == 0) {
            x = r.order[i];
            r.order[i] = r.order[j];
            r.order[j] = x;
        }
    }
    pthread_create(&t[0], NULL, race_replica, &r);
    pthread_create(&t[1], NULL, race_replica, &r);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    cr_assert_eq(r.failures, 0, "a replica's claim, effect or commit failed");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM public.effects"),
                 RACE_AGGS * RACE_PER, "every event ran once");
    cr_assert_eq(harness_scalar_ll(conn,
                                   "SELECT count(*) FROM (SELECT aggregate_id, seq "
                                   "FROM public.effects GROUP BY 1, 2 HAVING count(*) > 1) d"),
                 0, "none twice");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM (SELECT seq, row_number() OVER "
                                         "(PARTITION BY aggregate_id ORDER BY n) AS k "
                                         "FROM public.effects) e WHERE seq <> k"),
                 0, "each aggregate's effects in number order");
    cr_assert_eq(helper_count(conn, "parked_events", "true"), 0);
    free(r.order);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}

/*
 * A batch claimed as done reads its progress rows without their locks and
 * moves each on in one write that checks the number read, or makes a
 * missing one (migration 0021). Here another transaction runs the batch's
 * first event between that read and that write: the write must find the
 * row moved (or made), and the batch be decided again under the locks (the
 * first done already, the second runs). Written on what was read, the
 * progress would go back to the number read and the second be parked for
 * good.
 */
struct held_claim {
    struct obx_ledger *ledger;
    const struct obx_ledger_event *batch;
    struct obx_claim claims[2];
    outbox_status status;
};

static void *
claim_two_as_done(void *arg)
{
    struct held_claim *h = arg;
    outbox_error err;

    h->status = obx_ledger_begin(h->ledger, &err);
    if (h->status == OUTBOX_OK) {
        /* A lock wait long enough for the test to see it waiting on a loaded machine. */
        h->status =
            obx_ledger_claim_as_done(h->ledger, "audit", h->batch, 2, 10000, h->claims, &err);
    }
    if (h->status == OUTBOX_OK) {
        h->status = obx_ledger_commit(h->ledger, &err);
    }
    return NULL;
}

static long long
claims_waiting_on_a_lock(void)
{
    /* This test's database only: the tests beside it race claims of their own. */
    return harness_scalar_ll(conn, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type "
                                   "= 'Lock' AND query LIKE '%ledger_claim_ordered%' AND datname "
                                   "= current_database()");
}

/* `done_before` events of a new aggregate done first; the race is over the next two. */
static void
race_read_and_write(int done_before)
{
    struct obx_ledger *first = helper_ledger_open("order-batch-first");
    struct obx_ledger *second = helper_ledger_open("order-batch-second");
    struct helper_ordered o;
    struct obx_claim one;
    struct held_claim h = {.ledger = second};
    outbox_error err;
    pthread_t thread;

    helper_register_ordered(first, "audit");
    o = helper_ordered_new(conn, 1, done_before + 2);
    if (done_before > 0) {
        struct obx_claim before[8];

        cr_assert_leq(done_before, 8);
        helper_claim_batch(first, o.events, (size_t)done_before, before);
    }
    h.batch = &o.events[done_before];
    /* The first replica runs the next event and holds its transaction open. */
    LEDGER_OK(obx_ledger_begin(first, &err));
    LEDGER_OK(obx_ledger_claim_as_done(first, "audit", h.batch, 1, 1000, &one, &err));
    cr_assert_eq(one.state, OBX_CLAIM_RUN);
    /* The second reads the progress as it was, finds both next, and waits to write it. */
    cr_assert_eq(pthread_create(&thread, NULL, claim_two_as_done, &h), 0);
    for (int i = 0; i < 500 && claims_waiting_on_a_lock() == 0; i++) {
        harness_sleep_ms(10);
    }
    cr_assert_eq(claims_waiting_on_a_lock(), 1, "the second claim waits on the progress row");
    LEDGER_OK(obx_ledger_commit(first, &err));
    cr_assert_eq(pthread_join(thread, NULL), 0);
    cr_assert_eq(h.status, OUTBOX_OK);
    cr_assert_eq(h.claims[0].state, OBX_CLAIM_DONE, "the first replica ran it (got %d)",
                 h.claims[0].state);
    cr_assert_eq(h.claims[1].state, OBX_CLAIM_RUN, "next (got %d)", h.claims[1].state);
    cr_assert_eq(helper_progress(conn, "audit", o.aggs[0]), done_before + 2);
    helper_ordered_free(&o);
    obx_ledger_close(second);
    obx_ledger_close(first);
}

Test(ledger_order_batch, a_progress_row_moved_after_it_was_read_is_decided_again_under_its_lock)
{
    race_read_and_write(1);
}

Test(ledger_order_batch, a_progress_row_made_after_it_was_missing_is_decided_again_under_its_lock)
{
    race_read_and_write(0);
}

/*
 * The one write moves the progress to the end of the run before the claim;
 * should the run's first event not run after all (it failed and its retry
 * is not due), the progress goes back to where it was, in the same
 * transaction, and the follower is parked.
 */
Test(ledger_order_batch, a_run_whose_first_event_backs_off_leaves_the_progress_where_it_was)
{
    struct obx_ledger *ledger = helper_ledger_open("order-batch");
    struct helper_ordered o;
    struct obx_claim claims[2];
    char sql[4096];

    helper_register_ordered(ledger, "audit");
    o = helper_ordered_new(conn, 1, 2);
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM outbox.fail('%s', 'audit', outbox.claim('%s', 'audit', 30, "
             "$e$%s$e$), 'smtp 451', $e$%s$e$, 10, 60000, 60000) WHERE outcome = 'retry'",
             o.ids[0], o.ids[0], o.envelopes[0], o.envelopes[0]);
    cr_assert_eq(harness_scalar_ll(conn, sql), 1, "event 1 failed, its retry a minute away");
    helper_claim_batch(ledger, o.events, 2, claims);
    cr_assert_eq(claims[0].state, OBX_CLAIM_BACKOFF, "got %d", claims[0].state);
    cr_assert_eq(claims[1].state, OBX_CLAIM_PARKED, "got %d", claims[1].state);
    cr_assert_leq(helper_progress(conn, "audit", o.aggs[0]), 0);
    helper_ordered_free(&o);
    obx_ledger_close(ledger);
}
