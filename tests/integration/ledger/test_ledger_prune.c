/* SPDX-License-Identifier: MIT */
/*
 * test_ledger_prune.c - the ledger's retention: only rows finished (done,
 * or dead-lettered) longer ago than the retention go, at most `limit` per
 * call, and rows another session holds are skipped, not waited for. A
 * pass's batches go on from where the one before stopped.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ledger/ledger.h"
#include "ledger_helpers.h"

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

TestSuite(ledger_prune, .init = setup, .fini = teardown, .timeout = 60);

/*
 * `n` ledger rows of `kind` for events created `age` ago (UUIDv7 ids of
 * that time, as the writer makes them), finished `finished` ago.
 */
static void
add_rows(int n, const char *kind, const char *age, const char *finished)
{
    char sql[1024];

    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox.processed_events (event_id, handler, status, attempts, "
             "finished_at, dead_at, last_error) "
             "SELECT outbox.uuid_v7(now() - interval '%s' + g * interval '1 ms'), '%s', "
             "CASE WHEN '%s' = 'done' THEN 'done' ELSE 'in_progress' END, "
             "CASE WHEN '%s' = 'dead' THEN 5 ELSE 0 END, "
             "CASE WHEN '%s' = 'done' THEN now() - interval '%s' END, "
             "CASE WHEN '%s' = 'dead' THEN now() - interval '%s' END, '%s' "
             "FROM generate_series(1, %d) AS g",
             age, kind, kind, kind, kind, finished, kind, finished, kind, n);
    harness_exec(conn, sql);
}

static size_t
prune(struct obx_ledger *ledger, long long retention_seconds, int limit)
{
    size_t deleted = 0;
    outbox_error err;

    LEDGER_OK(obx_ledger_prune(ledger, retention_seconds, limit, NULL, &deleted, &err));
    return deleted;
}

Test(ledger_prune, only_rows_finished_before_the_retention_go_and_at_most_limit_per_call)
{
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");
    long long retention_s = 30LL * 24 * 3600;

    add_rows(5, "done", "40 days", "35 days");       /* old and finished long ago: go */
    add_rows(2, "dead", "40 days", "35 days");       /* dead-lettered long ago: go */
    add_rows(3, "done", "40 days", "1 day");         /* old event, finished lately: stay */
    add_rows(2, "dead", "40 days", "1 day");         /* dead lately: stay */
    add_rows(4, "in_progress", "40 days", "0 days"); /* not finished: stay */
    add_rows(3, "done", "1 day", "1 day");           /* recent: stay */

    cr_assert_eq(prune(ledger, retention_s, 4), 4, "at most limit rows per call");
    cr_assert_eq(prune(ledger, retention_s, 4), 3);
    cr_assert_eq(prune(ledger, retention_s, 4), 0, "nothing else is old enough");
    cr_assert_eq(helper_count(conn, "processed_events", "true"), 12);
    cr_assert_eq(helper_count(conn, "processed_events",
                              "last_error IN ('done', 'dead') AND "
                              "coalesce(finished_at, dead_at) < now() - interval '30 days'"),
                 0);
    cr_assert_eq(helper_count(conn, "processed_events", "last_error = 'in_progress'"), 4);
    cr_assert_eq(prune(ledger, 0, 100), 8, "retention 0 takes every finished row");
    cr_assert_eq(helper_count(conn, "processed_events", "true"), 4);
    obx_ledger_close(ledger);
}

/*
 * `n` ledger rows of events whose ids are not time-ordered (`id_sql`: a
 * foreign writer's gen_random_uuid(), a v7 stamped in the future), claimed
 * `started` ago and, by `kind` (done or dead), finished `finished` ago.
 */
static void
add_foreign_rows(int n, const char *id_sql, const char *kind, const char *started,
                 const char *finished)
{
    char sql[1024];

    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox.processed_events (event_id, handler, status, attempts, "
             "started_at, finished_at, dead_at, last_error) "
             "SELECT %s, 'foreign', CASE WHEN '%s' = 'done' THEN 'done' ELSE 'in_progress' END, "
             "0, now() - interval '%s', "
             "CASE WHEN '%s' = 'done' THEN now() - interval '%s' END, "
             "CASE WHEN '%s' = 'dead' THEN now() - interval '%s' END, '%s' "
             "FROM generate_series(1, %d) AS g",
             id_sql, kind, started, kind, finished, kind, finished, kind, n);
    harness_exec(conn, sql);
}

/* A v4 id whose first 48 bits, read as UUIDv7 milliseconds, are after the year 8000. */
#define FUTURE_V4 "overlay(gen_random_uuid()::text PLACING 'ff' FROM 1)::uuid"

Test(ledger_prune, rows_of_event_ids_that_are_not_time_ordered_go_too)
{
    /* The key-range scan stops at the v7 of now - retention: these event ids sort after
     * it, today and for millennia, and their rows were kept forever. */
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");
    long long retention_s = 30LL * 24 * 3600;

    add_rows(2, "done", "40 days", "35 days");
    add_foreign_rows(3, FUTURE_V4, "done", "36 days", "35 days");
    add_foreign_rows(1, FUTURE_V4, "dead", "36 days", "35 days");
    add_foreign_rows(1, "outbox.uuid_v7('2100-01-01')", "done", "36 days", "35 days");
    add_foreign_rows(2, FUTURE_V4, "done", "36 days", "1 day");         /* finished lately: stay */
    add_foreign_rows(2, FUTURE_V4, "done", "1 day", "1 day");           /* recent: stay */
    add_foreign_rows(1, FUTURE_V4, "in_progress", "36 days", "0 days"); /* not finished */

    cr_assert_eq(prune(ledger, retention_s, 3), 3, "at most limit rows per call");
    cr_assert_eq(prune(ledger, retention_s, 3), 3);
    cr_assert_eq(prune(ledger, retention_s, 3), 1);
    cr_assert_eq(prune(ledger, retention_s, 3), 0, "nothing else is old enough");
    cr_assert_eq(helper_count(conn, "processed_events", "true"), 5);
    cr_assert_eq(helper_count(conn, "processed_events",
                              "coalesce(finished_at, dead_at) < now() - interval '30 days'"),
                 0, "every row finished before the retention went, whatever its event id");
    obx_ledger_close(ledger);
}

Test(ledger_prune, rows_another_session_holds_are_skipped_not_waited_for)
{
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");
    PGconn *holder = helper_connect();
    long long started_ms;

    add_rows(6, "done", "40 days", "35 days");
    harness_exec(holder, "BEGIN");
    harness_exec(holder, "SELECT 1 FROM outbox.processed_events ORDER BY event_id LIMIT 2 "
                         "FOR UPDATE");
    started_ms = harness_now_ms();
    cr_assert_eq(prune(ledger, 3600, 100), 4, "the two held rows are skipped");
    cr_assert(harness_now_ms() - started_ms < 5000, "prune waited for the held rows");
    harness_exec(holder, "COMMIT");
    cr_assert_eq(prune(ledger, 3600, 100), 2);
    PQfinish(holder);
    obx_ledger_close(ledger);
}

static size_t
prune_from(struct obx_ledger *ledger, struct obx_prune_cursor *cursor, int limit)
{
    size_t deleted = 0;
    outbox_error err;

    LEDGER_OK(obx_ledger_prune(ledger, 3600, limit, cursor, &deleted, &err));
    return deleted;
}

Test(ledger_prune, a_pass_goes_on_from_where_its_last_batch_stopped)
{
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");
    struct obx_prune_cursor cursor = {{0}};

    add_rows(3, "in_progress", "40 days", "0 days"); /* kept, at the old end */
    add_rows(4, "done", "39 days", "35 days");
    cr_assert_eq(prune_from(ledger, &cursor, 2), 2);
    cr_assert(cursor.after[0] != '\0', "the batch says where it stopped");
    /* The oldest unfinished row finishes (long ago, as the test ages rows): behind the
     * pass's place now, so it waits for the next pass. */
    harness_exec(conn, "UPDATE outbox.processed_events SET status = 'done', "
                       "finished_at = now() - interval '35 days' WHERE event_id = "
                       "(SELECT event_id FROM outbox.processed_events "
                       "WHERE status = 'in_progress' ORDER BY event_id LIMIT 1)");
    cr_assert_eq(prune_from(ledger, &cursor, 10), 2, "the last two done rows, after the place");
    memset(&cursor, 0, sizeof(cursor));
    cr_assert_eq(prune_from(ledger, &cursor, 10), 1, "the next pass starts at the oldest row");
    cr_assert_eq(helper_count(conn, "processed_events", "true"), 2);
    obx_ledger_close(ledger);
}

Test(ledger_prune, a_batch_ending_inside_an_events_handlers_leaves_the_rest_to_the_next)
{
    /* Two handlers' rows of one event: a batch of one takes one of them, and the pass's
     * next batch still finds the other (the place is an event id, not a row). */
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");
    struct obx_prune_cursor cursor = {{0}};

    add_rows(1, "done", "40 days", "35 days");
    harness_exec(conn, "INSERT INTO outbox.processed_events (event_id, handler, status, "
                       "attempts, finished_at) SELECT event_id, 'other', 'done', 0, finished_at "
                       "FROM outbox.processed_events");
    cr_assert_eq(prune_from(ledger, &cursor, 1), 1);
    cr_assert_eq(prune_from(ledger, &cursor, 1), 1, "the event's other handler row");
    cr_assert_eq(helper_count(conn, "processed_events", "true"), 0);
    obx_ledger_close(ledger);
}

Test(ledger_prune, a_bad_retention_or_limit_is_refused)
{
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");
    size_t deleted = 0;
    outbox_error err;

    cr_assert_eq(obx_ledger_prune(ledger, -1, 10, NULL, &deleted, &err), OUTBOX_EINVAL);
    cr_assert_eq(obx_ledger_prune(ledger, 60, 0, NULL, &deleted, &err), OUTBOX_EINVAL);
    obx_ledger_close(ledger);
}
