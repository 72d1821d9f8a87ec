/* SPDX-License-Identifier: MIT */
/*
 * test_store_race.c - leasing under contention and over time: replicas
 * get disjoint batches, never more than the limit; rows are claimed by
 * state, so a low id committed late is still leased; an expired lease is
 * taken over and the old holder changes nothing; a row whose leases keep
 * running out is quarantined as dead.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

TestSuite(store_race, .init = setup, .fini = teardown, .timeout = 120);

enum { BACKLOG = 2000, REPLICAS = 6, BATCH = 50 };

struct replica {
    struct obx_store *store;
    char (*ids)[37]; /* every id this replica leased, in order */
    size_t leased;
    size_t max_batch;
    int batches;
    char failure[600]; /* "" unless a call failed; asserted on the test's thread */
};

/* Leases and finishes until a lease comes back empty. */
static void *
replica_run(void *arg)
{
    struct replica *r = arg;
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_MARK, 5);
    outbox_error err;

    for (;;) {
        struct obx_lease lease;
        struct obx_finish_counts counts;
        enum obx_row_outcome outcomes[BATCH];

        if (obx_store_lease(r->store, BATCH, 60, 5, &lease, &err) != OUTBOX_OK) {
            snprintf(r->failure, sizeof(r->failure), "lease: %s", err.message);
            return NULL;
        }
        if (lease.count == 0) {
            obx_lease_fini(&lease);
            return NULL;
        }
        r->batches++;
        r->max_batch = lease.count > r->max_batch ? lease.count : r->max_batch;
        if (lease.count > BATCH) {
            snprintf(r->failure, sizeof(r->failure), "a batch of %zu rows", lease.count);
            obx_lease_fini(&lease);
            return NULL;
        }
        for (size_t i = 0; i < lease.count; i++) {
            outcomes[i] = OBX_ROW_DONE;
            if (r->leased < BACKLOG) {
                snprintf(r->ids[r->leased], 37, "%s", obx_lease_id(&lease, i));
            }
            r->leased++; /* beyond BACKLOG only counted: the test fails on the total */
        }
        if (obx_store_finish(r->store, &lease, outcomes, NULL, &opts, &counts, &err) != OUTBOX_OK) {
            snprintf(r->failure, sizeof(r->failure), "finish: %s", err.message);
            obx_lease_fini(&lease);
            return NULL;
        }
        obx_lease_fini(&lease);
    }
}

static int
compare_ids(const void *a, const void *b)
{
    return strcmp(a, b);
}

Test(store_race, concurrent_replicas_lease_every_row_exactly_once_in_batches_within_the_limit)
{
    struct replica replicas[REPLICAS];
    pthread_t threads[REPLICAS];
    char(*all)[37] = calloc((size_t)BACKLOG * REPLICAS, 37);
    size_t total = 0;

    cr_assert_not_null(all);
    for (int k = 0; k < 4; k++) {
        helper_enqueue(conn, BACKLOG / 4);
    }
    for (int i = 0; i < REPLICAS; i++) {
        memset(&replicas[i], 0, sizeof(replicas[i]));
        replicas[i].store = helper_store_open("store-race");
        replicas[i].ids = calloc(BACKLOG, 37);
        cr_assert_not_null(replicas[i].ids);
    }
    for (int i = 0; i < REPLICAS; i++) {
        cr_assert_eq(pthread_create(&threads[i], NULL, replica_run, &replicas[i]), 0);
    }
    for (int i = 0; i < REPLICAS; i++) {
        pthread_join(threads[i], NULL);
    }
    for (int i = 0; i < REPLICAS; i++) {
        struct replica *r = &replicas[i];

        cr_assert_str_empty(r->failure, "replica %d: %s", i, r->failure);
        cr_assert_leq(r->max_batch, BATCH, "replica %d got a batch of %zu", i, r->max_batch);
        cr_assert_leq(r->leased, BACKLOG, "replica %d leased %zu rows", i, r->leased);
        memcpy(all[total], r->ids, r->leased * 37);
        total += r->leased;
        obx_store_close(r->store);
        free(r->ids);
        cr_log_info("replica %d: %d batches, %zu rows", i, r->batches, r->leased);
    }
    qsort(all, total, 37, compare_ids);
    for (size_t i = 1; i < total; i++) {
        cr_assert_str_neq(all[i - 1], all[i], "row %s was leased twice", all[i]);
    }
    cr_assert_eq(total, BACKLOG, "every row leased once: %zu of %d", total, BACKLOG);
    cr_assert_eq(helper_count(conn, "status = 'done'"), BACKLOG);
    free(all);
}

Test(store_race, a_batch_of_expired_and_pending_rows_stays_within_the_limit)
{
    struct obx_store *store = helper_store_open("store-race");
    struct obx_lease first, next;
    size_t total = 0;

    helper_enqueue(conn, 15);
    helper_lease(store, 5, 60, &first);
    /* The first claim's holder dies: its 5 rows come back beside the 10 still fresh. */
    harness_exec(conn, "UPDATE outbox.relay_claims SET expires_at = now() - interval '1 second'");
    for (int i = 0; i < 4; i++) {
        helper_lease(store, 8, 60, &next);
        cr_assert_leq(next.count, 8, "a batch never passes the limit");
        total += next.count;
        obx_lease_fini(&next);
    }
    cr_assert_eq(total, 15, "the 5 given back and the 10 fresh, each once");
    cr_assert_eq(helper_count(conn, "status = 'leased' AND lease_expiries = 1"), 5,
                 "the rows given back are charged one expiry and leased by row");
    obx_lease_fini(&first);
    obx_store_close(store);
}

Test(store_race, a_low_id_committed_after_higher_ids_is_still_leased)
{
    struct obx_store *store = helper_store_open("store-race");
    PGconn *slow = helper_connect();
    struct obx_lease first, second;
    char *low_id;
    char *first_id;

    harness_exec(slow, "BEGIN");
    low_id = harness_scalar_text(slow, "SELECT outbox.enqueue('movie', gen_random_uuid(), "
                                       "'review.logged', '{}')::text");
    helper_enqueue(conn, 3); /* later ids, committed first */
    helper_lease(store, 10, 60, &first);
    cr_assert_eq(first.count, 3);
    first_id = strdup(obx_lease_id(&first, 0));
    cr_assert_lt(strcmp(low_id, first_id), 0, "the open transaction's id sorts lower");
    harness_exec(slow, "COMMIT");
    helper_lease(store, 10, 60, &second);
    cr_assert_eq(second.count, 1, "the late commit is leased although its id is lower");
    cr_assert_str_eq(obx_lease_id(&second, 0), low_id);
    free(first_id);
    free(low_id);
    obx_lease_fini(&first);
    obx_lease_fini(&second);
    PQfinish(slow);
    obx_store_close(store);
}

static void
expect_takeover(enum obx_row_outcome outcome)
{
    struct obx_store *old_holder = helper_store_open("store-race-old");
    struct obx_store *new_holder = helper_store_open("store-race-new");
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_PRUNE, 5);
    struct obx_lease stale, fresh;
    struct obx_finish_counts counts;
    char sql[160];

    helper_enqueue(conn, 3);
    helper_lease(old_holder, 10, 1, &stale);
    cr_assert_eq(stale.count, 3);
    /* Database time decides when a lease has run out. */
    HARNESS_WAIT_UNTIL(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.relay_claims "
                                               "WHERE expires_at < now()") == 1,
                       5000);
    helper_lease(new_holder, 10, 60, &fresh);
    cr_assert_eq(fresh.count, 3, "expired leases are leased again");
    cr_assert_str_neq(fresh.token, stale.token);
    counts = helper_finish_all(old_holder, &stale, outcome, "late", &opts);
    cr_assert_eq(counts.lost, 3, "the old holder changes nothing");
    cr_assert_eq(counts.done + counts.retried + counts.dead + counts.released + counts.invalid, 0);
    snprintf(sql, sizeof(sql),
             "status = 'leased' AND lease_token = '%s' AND attempts = 0 "
             "AND lease_expiries = 1",
             fresh.token);
    cr_assert_eq(helper_count(conn, sql), 3, "the rows still belong to the new holder");
    counts = helper_finish_all(new_holder, &fresh, OBX_ROW_DONE, NULL, &opts);
    cr_assert_eq(counts.done, 3);
    obx_lease_fini(&stale);
    obx_lease_fini(&fresh);
    obx_store_close(old_holder);
    obx_store_close(new_holder);
}

Test(store_race, an_expired_lease_is_taken_over_and_the_old_done_changes_nothing)
{
    expect_takeover(OBX_ROW_DONE);
}

Test(store_race, an_expired_lease_is_taken_over_and_the_old_retry_changes_nothing)
{
    expect_takeover(OBX_ROW_RETRY);
}

Test(store_race, five_lease_expiries_quarantine_the_row_as_dead_with_a_dead_letter)
{
    struct obx_store *store = helper_store_open("store-race");
    struct obx_lease lease;
    outbox_error err;

    helper_enqueue(conn, 1);
    /* Leases 1 to 5 publish (and crash); the sixth finds the fifth expiry. */
    for (int expiries = 0; expiries <= 5; expiries++) {
        cr_assert_eq(obx_store_lease(store, 10, 60, 5, &lease, &err), OUTBOX_OK, "%s", err.message);
        if (expiries < 5) {
            cr_assert_eq(lease.count, 1, "after %d expiries: leased again", expiries);
            cr_assert_eq(lease.quarantined, 0);
        } else {
            cr_assert_eq(lease.count, 0, "the fifth expiry does not lease the row");
            cr_assert_eq(lease.quarantined, 1);
        }
        obx_lease_fini(&lease);
        /* The relay that held it crashed: its lease runs out (moved, not waited for). */
        harness_exec(conn, "UPDATE outbox.events SET leased_until = now() - interval '1 second' "
                           "WHERE status = 'leased'");
        harness_exec(conn,
                     "UPDATE outbox.relay_claims SET expires_at = now() - interval '1 second'");
    }
    cr_assert_eq(helper_count(conn, "status = 'dead' AND lease_expiries = 5 AND attempts = 0 "
                                    "AND lease_token IS NULL "
                                    "AND last_error = 'lease_expired_without_outcome'"),
                 1);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters d "
                                         "JOIN outbox.events e ON e.id = d.event_id "
                                         "WHERE d.handler = '' AND d.envelope = e.envelope "
                                         "AND d.reason = 'lease_expired_without_outcome'"),
                 1);
    cr_assert_eq(obx_store_lease(store, 10, 60, 5, &lease, &err), OUTBOX_OK);
    cr_assert_eq(lease.count + (size_t)lease.quarantined, 0, "a dead row stays dead");
    obx_lease_fini(&lease);
    obx_store_close(store);
}
