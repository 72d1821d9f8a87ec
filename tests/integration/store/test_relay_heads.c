/* SPDX-License-Identifier: MIT */
/*
 * test_relay_heads.c - with ordering on, relays take an ordered aggregate's
 * rows from its head only (migration 0016), against a real PostgreSQL: a
 * batch holds an aggregate's run in number order whatever the order of
 * its transactions' ids; a row whose predecessor is still on its way waits
 * in the row lease and is woken by that publish; a batch cut between two
 * numbers leaves the later one waiting; a dead head holds its aggregate
 * only, until it is skipped. Unordered rows are checked by the window and
 * lease tests, which run with ordering off.
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

static const char agg_x[] = "11111111-1111-4111-8111-111111111111";
static const char agg_y[] = "22222222-2222-4222-8222-222222222222";

static void
setup(void)
{
    conn = harness_pg_connect_fresh_ordered();
    store = helper_store_open("heads-test");
}

static void
teardown(void)
{
    helper_store_suite_end(&conn, &store);
}

TestSuite(relay_heads, .init = setup, .fini = teardown, .timeout = 60);

/* Writes one event of aggregate `agg` on `c` (in its open transaction, if any); returns its id. */
static char *
enqueue_on(PGconn *c, const char *agg)
{
    char sql[256];

    snprintf(sql, sizeof(sql), "SELECT outbox.enqueue('order', '%s', 'changed', '{\"n\":1}')::text",
             agg);
    return harness_scalar_text(c, sql);
}

/* The aggregate_seq of event `id`. */
static long long
seq_of(const char *id)
{
    char sql[160];

    snprintf(sql, sizeof(sql), "SELECT aggregate_seq FROM outbox.events WHERE id = '%s'", id);
    return harness_scalar_ll(conn, sql);
}

/* The numbers of the lease's rows, in the lease's order, as "1,2,3". */
static void
lease_seqs(const struct obx_lease *lease, char *out, size_t cap)
{
    size_t used = 0;

    out[0] = '\0';
    for (size_t i = 0; i < lease->count && used < cap; i++) {
        used += (size_t)snprintf(out + used, cap - used, "%s%lld", i > 0 ? "," : "",
                                 seq_of(obx_lease_id(lease, i)));
    }
}

/*
 * Two events of one aggregate whose transactions' ids are in the other
 * order than their numbers: the one numbered 2 has the lower tx. Returns
 * the ids of 1 and 2.
 */
static void
numbers_against_tx_order(char **first, char **second)
{
    PGconn *early = helper_connect();

    harness_exec(early, "BEGIN");
    harness_exec(early, "SELECT pg_current_xact_id()"); /* takes its id now */
    *first = enqueue_on(conn, agg_x);                   /* numbered 1, a later tx */
    *second = enqueue_on(early, agg_x);                 /* numbered 2, the earlier tx */
    harness_exec(early, "COMMIT");
    PQfinish(early);
    cr_assert_eq(seq_of(*first), 1);
    cr_assert_eq(seq_of(*second), 2);
}

/* Publishes every row of `lease` (mark mode) and frees it. */
static void
publish(struct obx_store *s, struct obx_lease *lease)
{
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_MARK, 5);
    struct obx_finish_counts counts = helper_finish_all(s, lease, OBX_ROW_DONE, NULL, &opts);

    cr_assert_eq(counts.done, lease->count);
    obx_lease_fini(lease);
}

Test(relay_heads, a_batch_holds_an_aggregate_in_number_order_not_in_tx_order)
{
    struct obx_lease lease;
    char *first, *second, seqs[64];

    numbers_against_tx_order(&first, &second);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.events "
                                         "WHERE aggregate_seq = 2 AND tx < (SELECT tx FROM "
                                         "outbox.events WHERE aggregate_seq = 1)"),
                 1, "the fixture: number 2 has the lower transaction id");
    helper_lease(store, 100, 60, &lease);
    lease_seqs(&lease, seqs, sizeof(seqs));
    cr_assert_str_eq(seqs, "1,2", "an aggregate's run goes out in number order");
    obx_lease_fini(&lease);
    free(first);
    free(second);
}

Test(relay_heads, a_successor_waits_while_its_head_is_out_and_its_publish_wakes_it)
{
    struct obx_store *other = helper_store_open("heads-test-2");
    struct obx_lease head, none, next;
    char *one = enqueue_on(conn, agg_x), *two;

    helper_lease(store, 100, 60, &head);
    cr_assert_eq(head.count, 1);
    two = enqueue_on(conn, agg_x);
    helper_lease(other, 100, 60, &none);
    cr_assert_eq(none.count, 0, "number 2 is not published while number 1 is out");
    /* In the row lease: due after its write (created_at), not a fresh row of
     * the windows. Not "> now()": its first look is due 100 ms on, which a
     * loaded machine may pass before this query. */
    cr_assert_eq(helper_count(conn, "aggregate_seq = 2 AND last_error = 'waiting_for_head' "
                                    "AND next_attempt_at > created_at"),
                 1, "it waits in the row lease, marked");
    obx_lease_fini(&none);
    publish(store, &head);
    cr_assert_eq(helper_count(conn, "aggregate_seq = 2 AND next_attempt_at <= now()"), 1,
                 "the head's publish wakes it");
    helper_lease(store, 100, 60, &next);
    cr_assert_eq(next.count, 1, "the relay that published the head leases it next");
    cr_assert_str_eq(obx_lease_id(&next, 0), two);
    publish(store, &next);
    cr_assert_eq(helper_count(conn, "last_error IS NOT NULL"), 0,
                 "a published row no longer says it waits");
    free(one);
    free(two);
    obx_store_close(other);
}

/*
 * The publish of a head leases the run waiting behind it to the relay that
 * published it, in the same write that wakes it: no other relay takes it,
 * and that relay's next lease is the run, in number order. A relay that
 * closes before leasing again gives it back, due, to the others.
 */
Test(relay_heads, a_head_s_publish_leases_the_run_behind_it_to_its_relay)
{
    struct obx_store *other = helper_store_open("heads-test-2");
    struct obx_store *leaving = helper_store_open("heads-test-3");
    struct obx_lease head, none, next;
    char seqs[64];
    char *ids[5];

    ids[0] = enqueue_on(conn, agg_x);
    helper_lease(store, 100, 60, &head);
    cr_assert_eq(head.count, 1);
    ids[1] = enqueue_on(conn, agg_x);
    ids[2] = enqueue_on(conn, agg_x);
    helper_lease(other, 100, 60, &none);
    cr_assert_eq(none.count, 0, "numbers 2 and 3 wait while number 1 is out");
    obx_lease_fini(&none);
    publish(store, &head);
    cr_assert_eq(helper_count(conn, "aggregate_seq IN (2, 3) AND status = 'leased' "
                                    "AND last_error IS NULL"),
                 2, "the head's publish leases the run behind it");
    helper_lease(other, 100, 60, &none);
    cr_assert_eq(none.count, 0, "no other relay takes it");
    obx_lease_fini(&none);
    helper_lease(store, 100, 60, &next);
    lease_seqs(&next, seqs, sizeof(seqs));
    cr_assert_str_eq(seqs, "2,3", "the relay that published the head publishes its run next");
    publish(store, &next);

    /* Given back by a relay that closes before its next lease. */
    helper_lease(leaving, 100, 60, &head);
    cr_assert_eq(head.count, 0);
    obx_lease_fini(&head);
    ids[3] = enqueue_on(conn, agg_x);
    helper_lease(leaving, 100, 60, &head);
    cr_assert_eq(head.count, 1);
    ids[4] = enqueue_on(conn, agg_x);
    helper_lease(other, 100, 60, &none);
    cr_assert_eq(none.count, 0, "number 5 waits while number 4 is out");
    obx_lease_fini(&none);
    publish(leaving, &head);
    cr_assert_eq(helper_count(conn, "aggregate_seq = 5 AND status = 'leased'"), 1);
    obx_store_close(leaving);
    cr_assert_eq(helper_count(conn, "aggregate_seq = 5 AND status = 'pending' "
                                    "AND next_attempt_at <= now() AND attempts = 0 "
                                    "AND lease_expiries = 0"),
                 1, "a closing relay gives its woken run back, due, no attempt spent");
    helper_lease(other, 100, 60, &next);
    cr_assert_eq(next.count, 1);
    cr_assert_str_eq(obx_lease_id(&next, 0), ids[4]);
    publish(other, &next);
    cr_assert_eq(helper_count(conn, "published_at IS NULL"), 0);
    for (int i = 0; i < 5; i++) {
        free(ids[i]);
    }
    obx_store_close(other);
}

/*
 * A finish that lost one row's lease (another relay holds that head now)
 * records nothing for it, so its wake-up leases nothing behind that head:
 * the rows wait for its real publish. The heads it did record wake as
 * usual.
 */
Test(relay_heads, a_finish_that_lost_a_head_s_lease_leases_nothing_behind_it)
{
    struct obx_store *other = helper_store_open("heads-test-2");
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_MARK, 5);
    struct obx_finish_counts counts;
    struct obx_lease heads, none;
    char *ids[4], sql[256];

    ids[0] = enqueue_on(conn, agg_x);
    ids[1] = enqueue_on(conn, agg_y);
    helper_lease(store, 100, 60, &heads);
    cr_assert_eq(heads.count, 2);
    ids[2] = enqueue_on(conn, agg_x);
    ids[3] = enqueue_on(conn, agg_y);
    helper_lease(other, 100, 60, &none);
    cr_assert_eq(none.count, 0, "both number 2s wait for their heads");
    obx_lease_fini(&none);
    /* x's head was given back meanwhile and another relay leased it. */
    snprintf(sql, sizeof(sql),
             "UPDATE outbox.events SET status = 'leased', lease_token = gen_random_uuid(), "
             "leased_until = now() + interval '1 minute' WHERE id = '%s'",
             ids[0]);
    harness_exec(conn, sql);
    counts = helper_finish_all(store, &heads, OBX_ROW_DONE, NULL, &opts);
    cr_assert_eq(counts.done, 1, "the finish lost x's head");
    obx_lease_fini(&heads);
    cr_assert_eq(helper_count(conn, "aggregate_seq = 2 AND status = 'leased'"), 1,
                 "y's number 2 is leased behind its recorded head");
    cr_assert_eq(helper_count(conn, "aggregate_seq = 2 AND status = 'leased' AND aggregate_id = "
                                    "'22222222-2222-4222-8222-222222222222'"),
                 1, "and it is y's");
    for (int i = 0; i < 4; i++) {
        free(ids[i]);
    }
    obx_store_close(other);
}

Test(relay_heads, a_batch_cut_between_two_numbers_leaves_the_later_one_waiting)
{
    struct obx_lease lease;
    char *first, *second;

    numbers_against_tx_order(&first, &second);
    /* Limit 1 takes the lower tx: number 2, whose predecessor is not published. */
    helper_lease(store, 1, 60, &lease);
    cr_assert_eq(lease.count, 0, "number 2 must not go out before number 1");
    obx_lease_fini(&lease);
    helper_lease(store, 1, 60, &lease);
    cr_assert_eq(lease.count, 1);
    cr_assert_str_eq(obx_lease_id(&lease, 0), first);
    publish(store, &lease);
    helper_lease(store, 1, 60, &lease);
    cr_assert_eq(lease.count, 1, "woken by number 1's publish");
    cr_assert_str_eq(obx_lease_id(&lease, 0), second);
    obx_lease_fini(&lease);
    free(first);
    free(second);
}

Test(relay_heads, a_dead_head_holds_its_aggregate_only_until_it_is_skipped)
{
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_MARK, 1);
    struct obx_store_health h;
    struct obx_lease lease;
    outbox_error err;
    char *dead = enqueue_on(conn, agg_x), *behind, *other, sql[512];

    helper_lease(store, 100, 60, &lease);
    cr_assert_eq(helper_finish_all(store, &lease, OBX_ROW_RETRY, "nak", &opts).dead, 1);
    obx_lease_fini(&lease);
    behind = enqueue_on(conn, agg_x);
    other = enqueue_on(conn, agg_y);
    helper_lease(store, 100, 60, &lease);
    cr_assert_eq(lease.count, 1, "the other aggregate goes on");
    cr_assert_str_eq(obx_lease_id(&lease, 0), other);
    publish(store, &lease);
    /* Looked at again after its wait: still held, and put off again. */
    harness_exec(conn, "UPDATE outbox.events SET next_attempt_at = now() - interval '1 ms' "
                       "WHERE last_error = 'waiting_for_head'");
    harness_exec(conn, "CREATE TEMP TABLE looked AS SELECT clock_timestamp() AS at");
    helper_lease(store, 100, 60, &lease);
    cr_assert_eq(lease.count, 0, "a dead head holds its aggregate");
    obx_lease_fini(&lease);
    cr_assert_eq(obx_store_health(store, &h, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_eq(h.blocked_aggregates, 1, "the health sample counts the held aggregate");
    cr_assert_eq(helper_count(conn, "aggregate_seq = 2 AND aggregate_id = "
                                    "'11111111-1111-4111-8111-111111111111' "
                                    "AND last_error = 'waiting_for_head' "
                                    "AND next_attempt_at > (SELECT at FROM looked)"),
                 1, "the row lease looked at it and put it off again");
    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox.aggregate_skips (aggregate_type, aggregate_id, aggregate_seq, "
             "event_id) VALUES ('order', '%s', 1, '%s')",
             agg_x, dead);
    harness_exec(conn, sql);
    harness_exec(conn, "UPDATE outbox.events SET next_attempt_at = now() - interval '1 ms' "
                       "WHERE last_error = 'waiting_for_head'");
    helper_lease(store, 100, 60, &lease);
    cr_assert_eq(lease.count, 1, "a skipped head lets its aggregate go on");
    cr_assert_str_eq(obx_lease_id(&lease, 0), behind);
    obx_lease_fini(&lease);
    cr_assert_eq(obx_store_health(store, &h, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_eq(h.blocked_aggregates, 0, "a skipped head holds nothing");
    free(dead);
    free(behind);
    free(other);
}

Test(relay_heads, a_retried_head_goes_out_before_the_numbers_behind_it)
{
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_MARK, 5);
    struct obx_lease lease;
    char *one = enqueue_on(conn, agg_x), *two, seqs[64];

    helper_lease(store, 100, 60, &lease);
    helper_finish_all(store, &lease, OBX_ROW_RETRY, "nak", &opts);
    obx_lease_fini(&lease);
    two = enqueue_on(conn, agg_x);
    helper_lease(store, 100, 60, &lease);
    cr_assert_eq(lease.count, 0, "number 2 waits while number 1 backs off");
    obx_lease_fini(&lease);
    /* Both due: the row lease takes them as one run, in order. */
    harness_exec(conn, "UPDATE outbox.events SET next_attempt_at = now() - interval '1 ms' "
                       "WHERE next_attempt_at > created_at");
    helper_lease(store, 100, 60, &lease);
    lease_seqs(&lease, seqs, sizeof(seqs));
    cr_assert_str_eq(seqs, "1,2");
    obx_lease_fini(&lease);
    free(one);
    free(two);
}

Test(relay_heads, numbers_sent_with_a_failed_head_are_not_recorded_published)
{
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_MARK, 5);
    enum obx_row_outcome outcomes[3] = {OBX_ROW_RETRY, OBX_ROW_DONE, OBX_ROW_DONE};
    const char *reasons[3] = {"nak", NULL, NULL};
    struct obx_finish_counts counts;
    struct obx_lease lease;
    outbox_error err;
    char seqs[64];

    for (int i = 0; i < 3; i++) {
        free(enqueue_on(conn, agg_x));
    }
    helper_lease(store, 100, 60, &lease);
    lease_seqs(&lease, seqs, sizeof(seqs));
    cr_assert_str_eq(seqs, "1,2,3");
    /* Number 1 was refused; 2 and 3, sent with it, were stored by the stream. */
    cr_assert_eq(obx_store_finish(store, &lease, outcomes, reasons, &opts, &counts, &err),
                 OUTBOX_OK, "%s", err.message);
    cr_assert_eq(counts.done, 0, "no number is published before its predecessor");
    cr_assert_eq(counts.retried, 1);
    cr_assert_eq(counts.released, 2);
    obx_lease_fini(&lease);
    cr_assert_eq(helper_count(conn, "aggregate_seq IN (2, 3) AND published_at IS NULL "
                                    "AND last_error = 'waiting_for_head'"),
                 2, "they wait for their head, to go out again after it");
    free(enqueue_on(conn, agg_x));
    helper_lease(store, 100, 60, &lease);
    cr_assert_eq(lease.count, 0, "a number written after the failed head waits too");
    obx_lease_fini(&lease);
}
