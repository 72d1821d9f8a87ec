/* SPDX-License-Identifier: MIT */
/*
 * test_store.c - lease and finish against a real PostgreSQL: only due rows
 * are leased and never more than the limit, one committed token per batch,
 * and each outcome (done in both modes, retry with backoff in database
 * time, dead at max_attempts, release, invalid) writes what DESIGN.md says.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "store/store.h"
#include "store_helpers.h"

static PGconn *conn;
static struct obx_store *store;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    store = helper_store_open("store-test");
}

static void
teardown(void)
{
    helper_store_suite_end(&conn, &store);
}

TestSuite(store, .init = setup, .fini = teardown, .timeout = 60);

Test(store, leases_at_most_limit_rows_and_only_due_ones)
{
    struct obx_lease first, second, third;

    helper_enqueue(conn, 12);
    /* Five rows that are not due: two in backoff, one done, one dead, one invalid. */
    harness_exec(conn, "CREATE TABLE not_due AS SELECT id FROM outbox.events ORDER BY id LIMIT 5");
    harness_exec(conn, "UPDATE outbox.events SET next_attempt_at = now() + interval '1 hour' "
                       "WHERE id IN (SELECT id FROM not_due ORDER BY id LIMIT 2)");
    harness_exec(conn, "UPDATE outbox.events SET status = 'done', published_at = now() "
                       "WHERE id = (SELECT id FROM not_due ORDER BY id OFFSET 2 LIMIT 1)");
    harness_exec(conn, "UPDATE outbox.events SET status = 'dead' "
                       "WHERE id = (SELECT id FROM not_due ORDER BY id OFFSET 3 LIMIT 1)");
    harness_exec(conn, "UPDATE outbox.events SET status = 'invalid' "
                       "WHERE id = (SELECT id FROM not_due ORDER BY id OFFSET 4 LIMIT 1)");

    helper_lease(store, 5, 60, &first);
    cr_assert_eq(first.count, 5, "a backlog of 7 due rows leases exactly the limit");
    helper_lease(store, 100, 60, &second);
    cr_assert_eq(second.count, 2, "the other 2 due rows, not the 5 that are not due");
    helper_lease(store, 100, 60, &third);
    cr_assert_eq(third.count, 0, "rows under a running lease are not due");
    for (size_t i = 0; i < second.count; i++) {
        char *hit;
        char sql[256];

        snprintf(sql, sizeof(sql), "SELECT count(*)::text FROM not_due WHERE id = '%s'",
                 obx_lease_id(&second, i));
        hit = harness_scalar_text(conn, sql);
        cr_assert_str_eq(hit, "0", "row %s is not due but was leased", obx_lease_id(&second, i));
        free(hit);
        cr_assert_not(helper_lease_has(&first, obx_lease_id(&second, i)));
    }
    obx_lease_fini(&first);
    obx_lease_fini(&second);
    obx_lease_fini(&third);
}

Test(store, a_lease_is_committed_with_one_fresh_token_per_batch)
{
    struct obx_lease a, b;
    char sql[256];

    helper_enqueue(conn, 6);
    helper_lease(store, 3, 60, &a);
    helper_lease(store, 3, 60, &b);
    cr_assert_eq(a.count, 3);
    cr_assert_eq(b.count, 3);
    cr_assert_str_neq(a.token, b.token, "each batch gets its own token");
    /* Seen from another connection, so the claim was committed before the call returned. */
    snprintf(sql, sizeof(sql),
             "SELECT cardinality(ids) FROM outbox.relay_claims WHERE token = '%s' "
             "AND expires_at > now() + interval '50 seconds'",
             a.token);
    cr_assert_eq(harness_scalar_ll(conn, sql), 3);
    cr_assert(a.quarantined == 0);
    for (size_t i = 0; i < a.count; i++) {
        size_t len = 0;
        const char *envelope = obx_lease_envelope(&a, i, &len);

        cr_assert(strstr(envelope, obx_lease_id(&a, i)) != NULL, "the envelope carries its id");
        cr_assert_eq(len, strlen(envelope));
        cr_assert_eq(obx_lease_attempts(&a, i), 0);
    }
    obx_lease_fini(&a);
    obx_lease_fini(&b);
}

Test(store, done_in_prune_mode_deletes_the_rows)
{
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_PRUNE, 5);
    struct obx_lease lease;
    struct obx_finish_counts counts;

    helper_enqueue(conn, 4);
    helper_lease(store, 3, 60, &lease);
    counts = helper_finish_all(store, &lease, OBX_ROW_DONE, NULL, &opts);
    cr_assert_eq(counts.done, 3);
    cr_assert_eq(counts.lost, 0);
    cr_assert_eq(helper_count(conn, "true"), 1, "the 3 published rows are gone, 1 remains");
    cr_assert_eq(helper_count(conn, "status = 'pending'"), 1);
    obx_lease_fini(&lease);
}

Test(store, done_in_mark_mode_sets_done_and_published_at)
{
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_MARK, 5);
    struct obx_lease lease;
    struct obx_finish_counts counts;

    helper_enqueue(conn, 3);
    helper_lease(store, 10, 60, &lease);
    counts = helper_finish_all(store, &lease, OBX_ROW_DONE, NULL, &opts);
    cr_assert_eq(counts.done, 3);
    cr_assert_eq(helper_count(conn, "status = 'done' AND published_at IS NOT NULL "
                                    "AND published_at <= now() AND lease_token IS NULL "
                                    "AND leased_until IS NULL"),
                 3);
    obx_lease_fini(&lease);
}

/* The delay the finish scheduled for the single row, in ms of database time. */
static long long
scheduled_delay_ms(void)
{
    return harness_scalar_ll(conn, "SELECT (extract(epoch FROM next_attempt_at - now()) * 1000)"
                                   "::bigint FROM outbox.events");
}

Test(store, retry_waits_the_doubling_backoff_in_database_time)
{
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_MARK, 10);
    const long long expected_ms[] = {1000, 2000, 4000, 8000};

    helper_enqueue(conn, 1);
    for (int k = 0; k < 4; k++) {
        struct obx_lease lease;
        struct obx_finish_counts counts;
        long long delay_ms;

        helper_lease(store, 10, 60, &lease);
        cr_assert_eq(lease.count, 1, "try %d: the row is due again", k + 1);
        cr_assert_eq(obx_lease_attempts(&lease, 0), k);
        counts = helper_finish_all(store, &lease, OBX_ROW_RETRY, "nats: no stream", &opts);
        cr_assert_eq(counts.retried, 1);
        delay_ms = scheduled_delay_ms();
        /* +-10 % jitter; the check runs a few ms after the finish. */
        cr_assert(delay_ms >= expected_ms[k] * 9 / 10 - 250 && delay_ms <= expected_ms[k] * 11 / 10,
                  "failure %d: next attempt in %lld ms, expected %lld +-10 %%", k + 1, delay_ms,
                  expected_ms[k]);
        cr_assert_eq(helper_count(conn, "status = 'pending' AND last_error = 'nats: no stream'"),
                     1);
        cr_assert_eq(harness_scalar_ll(conn, "SELECT attempts FROM outbox.events"), k + 1);
        /* Due now, instead of waiting the backoff out. */
        harness_exec(conn, "UPDATE outbox.events SET next_attempt_at = now()");
        obx_lease_fini(&lease);
    }
}

Test(store, retry_goes_dead_exactly_at_max_attempts_with_a_dead_letter)
{
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_PRUNE, 3);

    helper_enqueue(conn, 1);
    for (int k = 1; k <= 3; k++) {
        struct obx_lease lease;
        struct obx_finish_counts counts;

        helper_lease(store, 10, 60, &lease);
        cr_assert_eq(lease.count, 1);
        counts = helper_finish_all(store, &lease, OBX_ROW_RETRY, "rejected \"x\"", &opts);
        cr_assert_eq(counts.retried, k < 3 ? 1 : 0, "failure %d", k);
        cr_assert_eq(counts.dead, k < 3 ? 0 : 1, "failure %d", k);
        cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters"),
                     k < 3 ? 0 : 1, "no dead letter before failure 3");
        harness_exec(conn, "UPDATE outbox.events SET next_attempt_at = now() "
                           "WHERE status = 'pending'");
        obx_lease_fini(&lease);
    }
    cr_assert_eq(helper_count(conn, "status = 'dead' AND attempts = 3 "
                                    "AND last_error = 'rejected \"x\"'"),
                 1, "dead rows are kept, never pruned");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters d "
                                         "JOIN outbox.events e ON e.id = d.event_id "
                                         "WHERE d.handler = '' AND d.reason = 'rejected \"x\"' "
                                         "AND d.attempts = 3 AND d.envelope = e.envelope"),
                 1);
}

Test(store, release_spends_no_attempt_and_defers_the_row)
{
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_MARK, 1);
    struct obx_lease lease, again;
    struct obx_finish_counts counts;
    long long delay_ms;

    helper_enqueue(conn, 2);
    helper_lease(store, 10, 60, &lease);
    /* max_attempts 1: a retry would kill the rows at once, a release must not. */
    counts = helper_finish_all(store, &lease, OBX_ROW_RELEASE, NULL, &opts);
    cr_assert_eq(counts.released, 2);
    cr_assert_eq(counts.dead, 0);
    cr_assert_eq(helper_count(conn, "status = 'pending' AND attempts = 0 AND lease_token IS NULL"),
                 2);
    delay_ms = harness_scalar_ll(conn, "SELECT (extract(epoch FROM min(next_attempt_at) - now()) "
                                       "* 1000)::bigint FROM outbox.events");
    cr_assert(delay_ms > 1000 && delay_ms <= 1500, "released for %lld ms, expected 1500", delay_ms);
    helper_lease(store, 10, 60, &again);
    cr_assert_eq(again.count, 0, "a released row waits its delay out");
    obx_lease_fini(&lease);
    obx_lease_fini(&again);
}

Test(store, invalid_keeps_the_row_with_its_reason)
{
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_PRUNE, 5);
    struct obx_lease lease, again;
    struct obx_finish_counts counts;
    size_t deleted = 99;
    outbox_error err;

    helper_enqueue(conn, 1);
    helper_lease(store, 10, 60, &lease);
    counts =
        helper_finish_all(store, &lease, OBX_ROW_INVALID, "subject token \"a b\" is bad", &opts);
    cr_assert_eq(counts.invalid, 1);
    cr_assert_eq(helper_count(conn, "status = 'invalid' AND attempts = 0 "
                                    "AND last_error = 'subject token \"a b\" is bad'"),
                 1);
    helper_lease(store, 10, 60, &again);
    cr_assert_eq(again.count, 0, "an invalid row is never leased again");
    cr_assert_eq(obx_store_prune_done(store, 0, 100, NULL, &deleted, &err), OUTBOX_OK, "%s",
                 err.message);
    cr_assert_eq(deleted, 0, "an invalid row is never deleted");
    cr_assert_eq(helper_count(conn, "true"), 1);
    obx_lease_fini(&lease);
    obx_lease_fini(&again);
}

Test(store, mixed_outcomes_apply_in_one_call_and_keep_hostile_reasons_intact)
{
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_MARK, 5);
    enum obx_row_outcome outcomes[4] = {OBX_ROW_DONE, OBX_ROW_RETRY, OBX_ROW_RELEASE,
                                        OBX_ROW_INVALID};
    const char *reasons[4] = {NULL, "a,b {c} \"d\" \\e NULL café", NULL, "bad \xff\xfe utf-8\n"};
    struct obx_finish_counts counts;
    struct obx_lease lease;
    outbox_error err;
    char sql[512];

    helper_enqueue(conn, 4);
    helper_lease(store, 4, 60, &lease);
    cr_assert_eq(lease.count, 4);
    cr_assert_eq(obx_store_finish(store, &lease, outcomes, reasons, &opts, &counts, &err),
                 OUTBOX_OK, "%s", err.message);
    cr_assert_eq(counts.done, 1);
    cr_assert_eq(counts.retried, 1);
    cr_assert_eq(counts.released, 1);
    cr_assert_eq(counts.invalid, 1);
    cr_assert_eq(counts.dead + counts.lost, 0);
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM outbox.events WHERE id = '%s' AND status = 'pending' "
             "AND attempts = 1 AND last_error = 'a,b {c} \"d\" \\e NULL café'",
             obx_lease_id(&lease, 1));
    cr_assert_eq(harness_scalar_ll(conn, sql), 1,
                 "commas, braces, quotes and backslashes survive the array literal");
    cr_assert_eq(helper_count(conn, "status = 'invalid' AND last_error = 'bad ?? utf-8?'"), 1,
                 "bytes the server would refuse are replaced, not fatal to the batch");
    obx_lease_fini(&lease);
}

Test(store, finishing_an_empty_lease_does_nothing)
{
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_MARK, 5);
    struct obx_finish_counts counts = {.done = 7};
    struct obx_lease lease;
    outbox_error err;

    helper_lease(store, 10, 60, &lease);
    cr_assert_eq(lease.count, 0);
    cr_assert_eq(obx_store_finish(store, &lease, NULL, NULL, &opts, &counts, &err), OUTBOX_OK);
    cr_assert_eq(counts.done + counts.lost, 0);
    obx_lease_fini(&lease);
}

Test(store, refuses_bad_arguments_without_touching_rows)
{
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_MARK, 0);
    struct obx_finish_counts counts;
    struct obx_lease lease;
    size_t deleted;
    outbox_error err;

    helper_enqueue(conn, 1);
    memset(&lease, 0xab, sizeof(lease));
    cr_assert_eq(obx_store_lease(store, 0, 60, 5, &lease, &err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "limit 0") != NULL, "%s", err.message);
    cr_assert(lease.rows == NULL && lease.count == 0, "a failed lease is left empty");
    obx_lease_fini(&lease);
    cr_assert_eq(obx_store_lease(store, 10, 0, 5, &lease, &err), OUTBOX_EINVAL);
    cr_assert_eq(obx_store_lease(store, 10, 60, 0, &lease, &err), OUTBOX_EINVAL);
    cr_assert_eq(obx_store_prune_done(store, -1, 10, NULL, &deleted, &err), OUTBOX_EINVAL);
    cr_assert_eq(obx_store_prune_done(store, 10, 0, NULL, &deleted, &err), OUTBOX_EINVAL);
    helper_lease(store, 10, 60, &lease);
    cr_assert_eq(obx_store_finish(store, &lease, (enum obx_row_outcome[]){OBX_ROW_DONE}, NULL,
                                  &opts, &counts, &err),
                 OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "max_attempts 0") != NULL, "%s", err.message);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.relay_claims"), 1,
                 "the claim is untouched");
    cr_assert_eq(helper_count(conn, "status = 'pending'"), 1, "and so is its row");
    obx_lease_fini(&lease);
}
