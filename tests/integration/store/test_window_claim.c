/* SPDX-License-Identifier: MIT */
/*
 * test_window_claim.c - the window claim against a real PostgreSQL: fresh
 * rows are claimed with no write to them, disjointly, in the window of
 * their commit (a row committed late with an older transaction id or time
 * is still claimed), a claim's rows are read by its token after its commit,
 * and a claim that runs out gives its rows back charged
 * one lease expiry, fences its holder's finish, and after repeated deaths
 * sends its rows to the dead letters.
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
    store = helper_store_open("window-test");
}

static void
teardown(void)
{
    helper_store_suite_end(&conn, &store);
}

TestSuite(window_claim, .init = setup, .fini = teardown, .timeout = 60);

/* Leases with max_lease_expiries `max`. */
static void
lease_max(struct obx_store *s, int limit, int max, struct obx_lease *lease)
{
    outbox_error err;
    outbox_status status = obx_store_lease(s, limit, 60, max, lease, &err);

    cr_assert_eq(status, OUTBOX_OK, "obx_store_lease: %s", err.message);
}

/* Makes every window claim run out now, as if its holder had died. */
static void
expire_claims(void)
{
    harness_exec(conn, "UPDATE outbox.relay_claims SET expires_at = now() - interval '1 second'");
}

Test(window_claim, claims_fresh_rows_disjointly_and_writes_nothing_to_them)
{
    struct obx_store *other = helper_store_open("window-test-2");
    struct obx_lease a, b, c;
    char *before, *after;

    helper_enqueue(conn, 7);
    /* Each row's xmin is the transaction that last wrote it: unchanged means unwritten. */
    before = harness_scalar_text(conn, "SELECT string_agg(xmin::text, ',' ORDER BY id) "
                                       "FROM outbox.events");
    helper_lease(store, 4, 60, &a);
    helper_lease(other, 4, 60, &b);
    helper_lease(store, 4, 60, &c);
    cr_assert_eq(a.count, 4, "the first claim takes the limit");
    cr_assert_eq(b.count, 3, "the second takes the rest");
    cr_assert_eq(c.count, 0, "claimed rows are not claimed again");
    for (size_t i = 0; i < b.count; i++) {
        cr_assert_not(helper_lease_has(&a, obx_lease_id(&b, i)), "claims are disjoint");
    }
    after = harness_scalar_text(conn, "SELECT string_agg(xmin::text, ',' ORDER BY id) "
                                      "FROM outbox.events");
    cr_assert_str_eq(before, after, "a window claim writes nothing to its rows");
    cr_assert_eq(helper_count(conn, "status = 'pending' AND lease_token IS NULL"), 7);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.relay_claims"), 2,
                 "one claim row per batch, committed before the call returned");
    free(before);
    free(after);
    obx_lease_fini(&a);
    obx_lease_fini(&b);
    obx_lease_fini(&c);
    obx_store_close(other);
}

/* The ids of the rows a claim's read returns with an envelope (claim_window_rows.sql), sorted. */
static char *
rows_of_claim(const char *token)
{
    char sql[256];

    snprintf(
        sql, sizeof(sql),
        "SELECT string_agg(r.id::text, ',' ORDER BY r.id) FILTER (WHERE r.envelope IS NOT NULL) "
        "FROM outbox.relay_claim_window_rows('%s') AS r",
        token);
    return harness_scalar_text(conn, sql);
}

Test(window_claim, a_claim_reads_its_rows_after_its_commit_whatever_claims_came_between)
{
    static const char token[] = "00000000-0000-7000-8000-0000000000a1";
    struct obx_lease next;
    char take[160], *first_two, *read;

    helper_enqueue(conn, 5);
    /* A claim that committed and has not read its rows yet, by the statements the
     * relay runs (0032's functions are their text): it chose ids only. */
    harness_exec(conn, "BEGIN");
    harness_exec(conn, "SELECT outbox.relay_claim_cursor()");
    snprintf(take, sizeof(take), "SELECT outbox.relay_claim_window_take(2, 60, 'reader', '%s')",
             token);
    cr_assert_eq(harness_scalar_ll(conn, take), 2, "the claim says how many rows it took");
    harness_exec(conn, "COMMIT");
    first_two = harness_scalar_text(conn, "SELECT string_agg(u.id::text, ',' ORDER BY u.id) "
                                          "FROM outbox.relay_claims AS c, unnest(c.ids) AS u(id)");
    /* Another relay claims in between, and gets the rest. */
    helper_lease(store, 10, 60, &next);
    cr_assert_eq(next.count, 3, "the next claim starts where the committed one stopped");
    read = rows_of_claim(token);
    cr_assert_str_eq(read, first_two, "the read returns the claim's own rows, envelopes and all");
    for (size_t i = 0; i < next.count; i++) {
        cr_assert_null(strstr(read, obx_lease_id(&next, i)), "the two claims are disjoint");
    }
    free(first_two);
    free(read);
    obx_lease_fini(&next);
}

Test(window_claim, a_row_committed_late_with_an_older_id_and_transaction_is_claimed)
{
    PGconn *late = helper_connect();
    struct obx_lease first, second, third;
    char *late_id;

    /* The late transaction starts first: its row has the older time, id and tx. */
    harness_exec(late, "BEGIN");
    late_id = harness_scalar_text(late, "SELECT outbox.enqueue('movie', gen_random_uuid(), "
                                        "'review.logged', '{\"n\":1}')::text");
    helper_enqueue(conn, 3);
    helper_lease(store, 100, 60, &first);
    cr_assert_eq(first.count, 3, "only the committed rows");
    harness_exec(late, "COMMIT");
    helper_enqueue(conn, 2);
    helper_lease(store, 100, 60, &second);
    helper_lease(store, 100, 60, &third);
    cr_assert_eq(second.count + third.count, 3, "the late row and the two after it");
    cr_assert(helper_lease_has(&second, late_id) || helper_lease_has(&third, late_id),
              "the row committed after younger ones is claimed in its commit's window");
    cr_assert_not(helper_lease_has(&first, late_id));
    free(late_id);
    obx_lease_fini(&first);
    obx_lease_fini(&second);
    obx_lease_fini(&third);
    PQfinish(late);
}

Test(window_claim, the_health_sample_sees_a_row_committed_late_below_the_windows_start)
{
    /* The sample starts its look for the oldest due row where the cursor's window starts
     * (its snapshot's xmin), not at the floor: a row whose transaction was open when the
     * window began, committed after the windows moved on and their claims were published,
     * lies below every claim and the window's position, and is still found. */
    PGconn *late = helper_connect();
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_MARK, 5);
    struct obx_store_health h;
    outbox_error err;

    harness_exec(late, "BEGIN");
    harness_exec(late, "SELECT outbox.enqueue('movie', gen_random_uuid(), 'review.logged', "
                       "'{\"n\":1}')");
    harness_exec(late, "UPDATE outbox.events SET created_at = now() - interval '1 hour', "
                       "next_attempt_at = now() - interval '1 hour' "
                       "WHERE tx = pg_current_xact_id()");
    for (int round = 0; round < 3; round++) {
        struct obx_lease claimed;

        helper_enqueue(conn, 3);
        helper_lease(store, 100, 60, &claimed);
        cr_assert_eq(claimed.count, 3, "round %d: the committed rows only", round);
        cr_assert_eq(helper_finish_all(store, &claimed, OBX_ROW_DONE, NULL, &opts).done, 3);
        obx_lease_fini(&claimed);
    }
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.relay_claims"), 0);
    harness_exec(late, "COMMIT");
    cr_assert_eq(obx_store_health(store, &h, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_geq(h.oldest_due_s, 3500, "the late row has been due an hour: %lld s",
                  h.oldest_due_s);
    PQfinish(late);
}

Test(window_claim, a_published_claim_costs_one_write_per_row)
{
    struct obx_lease lease;
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_PRUNE, 5);
    struct obx_finish_counts counts;

    helper_enqueue(conn, 5);
    helper_lease(store, 100, 60, &lease);
    counts = helper_finish_all(store, &lease, OBX_ROW_DONE, NULL, &opts);
    cr_assert_eq(counts.done, 5);
    cr_assert_eq(counts.lost, 0);
    cr_assert_eq(helper_count(conn, "true"), 0, "prune mode deletes them");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.relay_claims"), 0,
                 "the finish deletes its claim row");
    obx_lease_fini(&lease);
}

Test(window_claim, a_retried_row_leaves_the_windows_for_the_row_lease)
{
    struct obx_lease lease, again;
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_PRUNE, 5);
    struct obx_finish_counts counts;

    opts.backoff_base_ms = 1; /* due again almost at once */
    helper_enqueue(conn, 2);
    helper_lease(store, 100, 60, &lease);
    counts = helper_finish_all(store, &lease, OBX_ROW_RETRY, "nak", &opts);
    cr_assert_eq(counts.retried, 2);
    cr_assert_eq(helper_count(conn, "next_attempt_at > created_at AND attempts = 1"), 2,
                 "a retry moves the row out of the windows");
    harness_exec(conn, "SELECT pg_sleep(0.05)");
    helper_lease(store, 100, 60, &again);
    cr_assert_eq(again.count, 2, "the row lease takes them when due");
    cr_assert_eq(helper_count(conn, "status = 'leased'"), 2, "as a row lease, written");
    obx_lease_fini(&lease);
    obx_lease_fini(&again);
}

Test(window_claim, a_claim_run_out_gives_its_rows_back_and_fences_its_holder)
{
    struct obx_store *zombie = helper_store_open("window-test-zombie");
    struct obx_lease held, taken;
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_PRUNE, 5);
    struct obx_finish_counts counts;

    helper_enqueue(conn, 3);
    helper_lease(zombie, 100, 60, &held);
    cr_assert_eq(held.count, 3);
    expire_claims();
    helper_lease(store, 100, 60, &taken);
    cr_assert_eq(taken.count, 3, "the next lease takes the rows back");
    cr_assert_eq(taken.taken_over, 3, "and counts them taken over");
    cr_assert_eq(helper_count(conn, "status = 'leased' AND lease_expiries = 1"), 3,
                 "each charged one lease expiry, now under a row lease");
    /* The holder wakes and finishes: its claim is gone, so nothing changes. */
    counts = helper_finish_all(zombie, &held, OBX_ROW_DONE, NULL, &opts);
    cr_assert_eq(counts.done, 0);
    cr_assert_eq(counts.lost, 3, "the stalled holder's finish counts its rows lost");
    cr_assert_eq(helper_count(conn, "true"), 3, "and deletes none of them");
    counts = helper_finish_all(store, &taken, OBX_ROW_DONE, NULL, &opts);
    cr_assert_eq(counts.done, 3, "the new holder's finish publishes them");
    obx_lease_fini(&held);
    obx_lease_fini(&taken);
    obx_store_close(zombie);
}

Test(window_claim, a_row_whose_claims_keep_dying_goes_to_the_dead_letters)
{
    struct obx_lease lease;

    helper_enqueue(conn, 1);
    /* max_lease_expiries 2: a window claim that dies (1), then a row lease that dies (2). */
    lease_max(store, 100, 2, &lease);
    cr_assert_eq(lease.count, 1);
    obx_lease_fini(&lease);
    expire_claims();
    lease_max(store, 100, 2, &lease);
    cr_assert_eq(lease.count, 1, "given back and leased again by row");
    obx_lease_fini(&lease);
    harness_exec(conn, "UPDATE outbox.events SET leased_until = now() - interval '1 second'");
    lease_max(store, 100, 2, &lease);
    cr_assert_eq(lease.count, 0);
    cr_assert_eq(lease.quarantined, 1, "the second death quarantines it");
    cr_assert_eq(helper_count(conn, "status = 'dead' AND lease_expiries = 2"), 1);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters "
                                         "WHERE reason = 'lease_expired_without_outcome'"),
                 1);
    obx_lease_fini(&lease);
}

Test(window_claim, a_cursor_lost_in_a_crash_starts_over_and_loses_nothing)
{
    struct obx_lease first, again;

    helper_enqueue(conn, 4);
    helper_lease(store, 2, 60, &first);
    cr_assert_eq(first.count, 2);
    /* A crash empties the unlogged tables: no cursor, no claims. */
    harness_exec(conn, "TRUNCATE outbox.relay_cursor, outbox.relay_claims");
    helper_lease(store, 100, 60, &again);
    cr_assert_eq(again.count, 4, "every waiting row, those in flight included (sent again)");
    obx_lease_fini(&first);
    obx_lease_fini(&again);
}

/* Makes the next claim write the floor (it does every few seconds). */
static void
floor_due(void)
{
    harness_exec(conn, "UPDATE outbox.relay_floor SET written_at = now() - interval '1 minute'");
}

Test(window_claim, an_open_claim_keeps_the_floor_below_its_rows)
{
    struct obx_lease held, next, after;
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_MARK, 5);
    char *held_id;

    helper_enqueue(conn, 4);
    helper_lease(store, 2, 60, &held); /* in flight while the windows move on */
    helper_enqueue(conn, 3);
    helper_lease(store, 100, 60, &next); /* the first window's rest, then the next window */
    cr_assert_eq(next.count, 5);
    floor_due();
    helper_enqueue(conn, 1);
    helper_lease(store, 100, 60, &after); /* writes the floor: the window's xmin is past held */
    cr_assert_eq(after.count, 1);
    held_id = strdup(obx_lease_id(&held, 0));
    {
        char sql[256];

        snprintf(sql, sizeof(sql),
                 "SELECT count(*) FROM outbox.events WHERE id = '%s' "
                 "AND tx >= (SELECT tx FROM outbox.relay_floor)",
                 held_id);
        cr_assert_eq(harness_scalar_ll(conn, sql), 1,
                     "the floor passed the rows of a claim still open");
    }
    (void)helper_finish_all(store, &next, OBX_ROW_DONE, NULL, &opts);
    (void)helper_finish_all(store, &after, OBX_ROW_DONE, NULL, &opts);
    obx_lease_fini(&next);
    obx_lease_fini(&after);
    /* A crash: the cursor and the claims are gone; the floor is not. */
    harness_exec(conn, "TRUNCATE outbox.relay_cursor, outbox.relay_claims");
    helper_lease(store, 100, 60, &next);
    cr_assert_eq(next.count, 2, "the open claim's rows are claimed again, and only they");
    cr_assert(helper_lease_has(&next, held_id));
    free(held_id);
    obx_lease_fini(&held);
    obx_lease_fini(&next);
}

Test(window_claim, the_floor_passes_published_rows)
{
    struct obx_lease lease;
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_MARK, 5);

    helper_enqueue(conn, 30);
    helper_lease(store, 100, 60, &lease);
    (void)helper_finish_all(store, &lease, OBX_ROW_DONE, NULL, &opts);
    obx_lease_fini(&lease);
    helper_enqueue(conn, 1); /* claimed by the first claim below, and held */
    helper_floor_past_published(conn, store);
    cr_assert_eq(helper_count(conn, "published_at IS NULL "
                                    "AND tx < (SELECT tx FROM outbox.relay_floor)"),
                 0, "the floor passed a row not yet published");
}

Test(window_claim, mark_mode_finishes_a_batch_in_place)
{
    struct obx_lease lease;
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_MARK, 5);
    struct obx_finish_counts counts;
    long long in_place;
    char *indexed;

    /* No index may name a column the finish changes, or its update cannot be HOT. */
    indexed = harness_scalar_text(
        conn, "SELECT coalesce(string_agg(c.relname || '.' || a.attname, ', '), '') "
              "FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid "
              "JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum > 0 "
              "WHERE i.indrelid = 'outbox.events'::regclass "
              "AND a.attname IN ('status', 'published_at', 'leased_until', 'lease_token', "
              "'stream_seq') AND (a.attnum = ANY (i.indkey::int2[]) "
              "OR pg_get_expr(i.indpred, i.indrelid) ~ ('\\m' || a.attname || '\\M') "
              "OR pg_get_expr(i.indexprs, i.indrelid) ~ ('\\m' || a.attname || '\\M'))");
    cr_assert_str_eq(indexed, "", "indexes name what the mark changes: %s", indexed);
    free(indexed);
    /* And every row of a full batch is marked on its own page, with no index entry: a
     * heap-only tuple (pageinspect's HEAP_ONLY_TUPLE bit). */
    harness_exec(conn, "CREATE EXTENSION IF NOT EXISTS pageinspect");
    helper_enqueue(conn, 100);
    helper_lease(store, 100, 60, &lease);
    counts = helper_finish_all(store, &lease, OBX_ROW_DONE, NULL, &opts);
    cr_assert_eq(counts.done, 100);
    in_place = harness_scalar_ll(conn, "SELECT count(*) FROM outbox.events AS e, "
                                       "LATERAL heap_page_items(get_raw_page('outbox.events', "
                                       "(e.ctid::text::point)[0]::int)) AS p "
                                       "WHERE p.lp = (e.ctid::text::point)[1]::int "
                                       "AND p.t_infomask2 & 32768 <> 0");
    cr_assert_eq(in_place, 100,
                 "%lld of 100 marked rows were moved off their page or into "
                 "the indexes",
                 100 - in_place);
    obx_lease_fini(&lease);
}

Test(window_claim, the_health_sample_shows_how_long_the_oldest_claim_is_out)
{
    struct obx_store_health h;
    struct obx_lease lease;
    outbox_error err;

    cr_assert_eq(obx_store_health(store, &h, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_eq(h.claim_open_s, 0, "no claim is out");
    helper_enqueue(conn, 3);
    helper_lease(store, 100, 60, &lease);
    harness_exec(conn, "UPDATE outbox.relay_claims SET claimed_at = now() - interval '90 seconds'");
    cr_assert_eq(obx_store_health(store, &h, &err), OUTBOX_OK, "%s", err.message);
    cr_assert(h.claim_open_s >= 90 && h.claim_open_s < 120, "the oldest claim is %lld s out",
              h.claim_open_s);
    obx_lease_fini(&lease);
}
