/* SPDX-License-Identifier: MIT */
/*
 * test_store_prune.c - retention of published rows in mark mode: only done
 * rows published longer ago than the retention go, at most `limit` per
 * call, and rows in any other state stay whatever their age. A pass's
 * batches go on from where the one before stopped.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "aged_rows.h"
#include "harness.h"
#include "store/store.h"
#include "store_helpers.h"

static PGconn *conn;
static struct obx_store *store;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    store = helper_store_open("store-prune");
}

static void
teardown(void)
{
    helper_store_suite_end(&conn, &store);
}

TestSuite(store_prune, .init = setup, .fini = teardown, .timeout = 60);

/* Adds `n` rows in `status`, two hours old. */
static void
add_aged_rows(int n, const char *status)
{
    helper_enqueue(conn, n);
    aged_rows_from_pending(conn, status);
}

static size_t
prune(int retention_seconds, int limit)
{
    size_t deleted = 12345;
    outbox_error err;
    outbox_status status =
        obx_store_prune_done(store, retention_seconds, limit, NULL, &deleted, &err);

    cr_assert_eq(status, OUTBOX_OK, "prune: %s", err.message);
    return deleted;
}

/* One batch of a pass at `cursor`. */
static size_t
prune_from(struct obx_prune_cursor *cursor, int retention_seconds, int limit)
{
    size_t deleted = 12345;
    outbox_error err;
    outbox_status status =
        obx_store_prune_done(store, retention_seconds, limit, cursor, &deleted, &err);

    cr_assert_eq(status, OUTBOX_OK, "prune: %s", err.message);
    return deleted;
}

/*
 * Adds `n` rows as a foreign writer would, with ids from `id_sql` (not
 * time-ordered), in `status`, published (when done) `published` ago.
 */
static void
add_foreign_rows(int n, const char *id_sql, const char *status, const char *published)
{
    char sql[1024];

    helper_enqueue(conn, n);
    snprintf(sql, sizeof(sql),
             "WITH f AS (SELECT id, %s AS new_id FROM outbox.events WHERE status = 'pending' "
             "AND created_at > now() - interval '1 hour') "
             "UPDATE outbox.events e SET id = f.new_id, "
             "envelope = jsonb_set(e.envelope, '{id}', to_jsonb(f.new_id::text)), "
             "status = '%s', published_at = CASE WHEN '%s' = 'done' "
             "THEN now() - interval '%s' END, created_at = now() - interval '%s' "
             "FROM f WHERE e.id = f.id",
             id_sql, status, status, published, published);
    harness_exec(conn, sql);
}

/* A v4 id whose first 48 bits, read as UUIDv7 milliseconds, are after the year 8000. */
#define FUTURE_V4 "overlay(gen_random_uuid()::text PLACING 'ff' FROM 1)::uuid"

Test(store_prune, removes_only_old_done_rows_and_at_most_limit)
{
    add_aged_rows(5, "done");
    add_aged_rows(1, "dead");
    add_aged_rows(1, "invalid");
    add_aged_rows(1, "pending"); /* an old row still in backoff */
    helper_enqueue(conn, 2);
    harness_exec(conn, "UPDATE outbox.events SET status = 'done', published_at = now() "
                       "WHERE status = 'pending' AND created_at > now() - interval '1 hour'");

    cr_assert_eq(prune(3600, 3), 3, "at most the limit");
    cr_assert_eq(prune(3600, 3), 2, "the rest of the old done rows");
    cr_assert_eq(prune(3600, 3), 0, "nothing else is old and done");
    cr_assert_eq(helper_count(conn, "status = 'done'"), 2, "recently published rows stay");
    cr_assert_eq(helper_count(conn, "status IN ('dead', 'invalid', 'pending')"), 3,
                 "old rows in other states stay");
}

Test(store_prune, keeps_rows_until_their_retention_has_passed)
{
    add_aged_rows(2, "done");
    cr_assert_eq(prune(3 * 3600, 100), 0, "published two hours ago, kept three");
    cr_assert_eq(prune(3600, 100), 2);
}

Test(store_prune, keeps_a_row_published_recently_even_if_its_id_is_old)
{
    add_aged_rows(1, "done");
    /* Created two hours ago (say, after a long backoff), published just now. */
    harness_exec(conn, "UPDATE outbox.events SET published_at = now()");
    cr_assert_eq(prune(3600, 100), 0, "published_at decides, not the id");
    cr_assert_eq(helper_count(conn, "status = 'done'"), 1);
}

Test(store_prune, a_pass_goes_on_from_where_its_last_batch_stopped)
{
    /* Dead rows wait at the old end for an operator; a pass steps over them once, so its
     * next batch starts after them, and a row they hide from it waits for the next pass. */
    struct obx_prune_cursor cursor = {{0}};

    add_aged_rows(3, "dead");
    harness_exec(conn, "SELECT pg_sleep(0.01)"); /* the done rows' ids come after */
    add_aged_rows(4, "done");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.events AS d, "
                                         "outbox.events AS o WHERE d.status = 'dead' "
                                         "AND o.status = 'done' AND d.id > o.id"),
                 0, "the dead rows must be the oldest for this test");
    cr_assert_eq(prune_from(&cursor, 3600, 2), 2);
    cr_assert(cursor.after[0] != '\0', "the batch says where it stopped");
    /* Requeued and published again at once (two hours ago, as the test ages rows):
     * now done, behind the pass's place. */
    harness_exec(conn, "UPDATE outbox.events SET status = 'done', "
                       "published_at = now() - interval '2 hours' WHERE id = "
                       "(SELECT id FROM outbox.events WHERE status = 'dead' ORDER BY id LIMIT 1)");
    cr_assert_eq(prune_from(&cursor, 3600, 10), 2,
                 "the pass goes on after its place: the last two done rows, not the one behind");
    cr_assert_eq(helper_count(conn, "status = 'done'"), 1);
    cr_assert_eq(prune_from(&cursor, 3600, 10), 0, "nothing left after the place");
    memset(&cursor, 0, sizeof(cursor));
    cr_assert_eq(prune_from(&cursor, 3600, 10), 1, "the next pass starts at the oldest row");
    cr_assert_eq(helper_count(conn, "status = 'dead'"), 2, "dead rows stay");
}

Test(store_prune, removes_old_done_rows_whatever_their_id_in_bounded_batches)
{
    /* A foreign writer's gen_random_uuid() ids and a v7 stamped in 2100 sort after the
     * v7 of now - retention, today and for millennia: these rows were kept forever. */
    struct obx_prune_cursor cursor = {{0}};

    add_aged_rows(2, "done");
    add_foreign_rows(4, FUTURE_V4, "done", "2 hours");
    add_foreign_rows(1, "outbox.uuid_v7('2100-01-01')", "done", "2 hours");
    add_foreign_rows(2, FUTURE_V4, "done", "10 minutes"); /* not yet due */
    add_foreign_rows(1, FUTURE_V4, "dead", "2 hours");

    cr_assert_eq(prune_from(&cursor, 3600, 3), 3, "at most the limit");
    cr_assert_eq(prune_from(&cursor, 3600, 3), 3);
    cr_assert_eq(prune_from(&cursor, 3600, 3), 1, "the rest of the old done rows");
    cr_assert_eq(prune_from(&cursor, 3600, 3), 0, "nothing else is old and done");
    cr_assert_eq(helper_count(conn, "status = 'done'"), 2, "recently published rows stay");
    cr_assert_eq(helper_count(conn, "status = 'dead'"), 1, "a dead row stays");
    memset(&cursor, 0, sizeof(cursor));
    cr_assert_eq(prune_from(&cursor, 600, 10), 2, "their turn comes with their retention");
}
