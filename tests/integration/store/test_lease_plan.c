/* SPDX-License-Identifier: MIT */
/*
 * test_lease_plan.c - the window claim and the row lease read their rows in
 * order and stop after their limit in every state a busy outbox table
 * reaches: no statistics yet,
 * statistics from before a bulk load, hundreds of thousands of dead index
 * entries between vacuums, many done rows retained in mark mode, a long
 * backlog in retry backoff. Each test builds the state (autovacuum off for
 * the table, so it stays put), then reads the lease's plan in the store's
 * own session from EXPLAIN (FORMAT JSON) EXECUTE of its prepared lease (the
 * generic plan the relay runs): the window claim's two scans must be
 * ordered Index Scans of events_window_idx under their LIMIT, the row
 * lease's candidates one of events_retry_idx, with no sequential
 * scan, bitmap scan or sort (FACTS 14: a bitmap scan of every entry plus a
 * top-N sort, 77 ms a lease), and no node reads a table or index whole (a
 * hash join over the primary key, 12 ms a lease). EXPLAIN ANALYZE (rolled
 * back) shows the scan stops after the batch. The relay's health sample,
 * taken every 5 s, reads a bounded part of the table in every state too.
 *
 * Rows are made by INSERT ... SELECT from one row outbox.enqueue() wrote,
 * with the user triggers off while loading: 100,000 validated calls would
 * take a minute, and the rows are copies of a valid one.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "store/store.h"
#include "store_helpers.h"

enum { LIMIT = 100 };

static PGconn *conn;
static struct obx_store *store;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    harness_exec(conn, "ALTER TABLE outbox.events SET (autovacuum_enabled = off)");
    helper_enqueue(conn, 1);
    harness_exec(conn, "CREATE TABLE template AS SELECT * FROM outbox.events");
    harness_exec(conn, "DELETE FROM outbox.events");
    store = helper_store_open("lease-plan-test");
}

static void
teardown(void)
{
    helper_store_suite_end(&conn, &store);
}

TestSuite(lease_plan, .init = setup, .fini = teardown, .timeout = 240);

/*
 * Inserts `n` copies of the template row with fresh ids, in `status`, with
 * the SQL expressions given for next_attempt_at and published_at (`s` is
 * the row's number, 1..n), with ids from `id_sql`. Rows waiting in backoff
 * carry 3 attempts. A row is created at its next_attempt_at when that has
 * passed (a fresh row), now otherwise (a row that came back). load()'s ids are UUIDv7 in load
 * order, as the writers make them: the primary key then follows the heap, which makes reading it
 * whole look cheap to the planner.
 */
static void
load_ids(long long n, const char *id_sql, const char *status, const char *next_attempt_at,
         const char *published_at)
{
    char sql[1536];

    harness_exec(conn, "ALTER TABLE outbox.events DISABLE TRIGGER USER");
    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, tenant_id, "
             "data_subject, envelope, status, attempts, next_attempt_at, published_at, "
             "created_at) "
             "SELECT g.id, t.aggregate_type, t.aggregate_id, t.event_type, t.tenant_id, "
             "t.data_subject, jsonb_set(t.envelope, '{id}', to_jsonb(g.id::text)), '%s', "
             "CASE WHEN '%s' = 'pending' AND %s > now() THEN 3 ELSE 0 END, %s, %s, "
             "least(%s, now()) "
             "FROM template AS t, "
             "(SELECT %s AS id, s FROM generate_series(1, %lld) AS s) AS g",
             status, status, next_attempt_at, next_attempt_at, published_at, next_attempt_at,
             id_sql, n);
    harness_exec(conn, sql);
    harness_exec(conn, "ALTER TABLE outbox.events ENABLE ALWAYS TRIGGER events_row_valid");
    harness_exec(conn, "ALTER TABLE outbox.events ENABLE TRIGGER events_wakeup");
}

static void
load(long long n, const char *status, const char *next_attempt_at, const char *published_at)
{
    load_ids(n, "outbox.uuid_v7(clock_timestamp())", status, next_attempt_at, published_at);
}

static void
load_due(long long n)
{
    /* Oldest first, a millisecond apart, all due now. */
    load(n, "pending", "now() - interval '1 hour' + s * interval '1 millisecond'", "NULL");
}

/* The first node under `node` (itself included) whose string field `key` is `value`, or NULL. */
static json_t *
find_node(json_t *node, const char *key, const char *value)
{
    const char *field = json_string_value(json_object_get(node, key));
    size_t i;
    json_t *child;

    if (field != NULL && strcmp(field, value) == 0) {
        return node;
    }
    json_array_foreach(json_object_get(node, "Plans"), i, child)
    {
        json_t *hit = find_node(child, key, value);

        if (hit != NULL) {
            return hit;
        }
    }
    return NULL;
}

/* The plan node whose "Subplan Name" is `name`, anywhere below `node`. */
static json_t *
find_subplan(json_t *node, const char *name)
{
    return find_node(node, "Subplan Name", name);
}

/* The first node of `type` in the tree under `node`, or NULL. */
static json_t *
find_type(json_t *node, const char *type)
{
    return find_node(node, "Node Type", type);
}

/* The lease's plan in the store's session; the caller json_decref()s it. */
static json_t *
lease_plan(int analyze, char **text)
{
    outbox_error err;
    json_error_t jerr;
    json_t *doc, *top;
    outbox_status status = obx_store_lease_plan(store, LIMIT, analyze, text, &err);

    cr_assert_eq(status, OUTBOX_OK, "obx_store_lease_plan: %s: %s", outbox_status_name(status),
                 err.message);
    doc = json_loads(*text, 0, &jerr);
    cr_assert(doc != NULL, "EXPLAIN JSON does not parse: %s", jerr.text);
    top = json_object_get(json_array_get(doc, 0), "Plan");
    cr_assert(top != NULL, "no Plan in %s", *text);
    json_incref(top);
    json_decref(doc);
    return top;
}

/*
 * No node of the whole statement reads a table or an index in full: no
 * hash or merge join (they read their inner side whole; the prepared
 * lease's generic plan assumes 10% of the table and chose one), and every
 * index scan has a condition. The rows leased are joined back by id.
 */
static void
expect_no_full_read(const char *state, json_t *node, const char *text)
{
    static const char *const banned[] = {"Seq Scan", "Hash Join", "Merge Join"};
    const char *type = json_string_value(json_object_get(node, "Node Type"));
    json_t *plans = json_object_get(node, "Plans");
    size_t i;
    json_t *child;

    for (size_t b = 0; type != NULL && b < sizeof(banned) / sizeof(banned[0]); b++) {
        cr_assert(strcmp(type, banned[b]) != 0, "%s: the lease uses a %s: %s", state, type, text);
    }
    if (type != NULL && strcmp(type, "Index Scan") == 0) {
        cr_assert(json_object_get(node, "Index Cond") != NULL,
                  "%s: an index scan of %s without a condition reads it whole: %s", state,
                  json_string_value(json_object_get(node, "Index Name")), text);
    }
    json_array_foreach(plans, i, child)
    {
        expect_no_full_read(state, child, text);
    }
}

/*
 * The row lease's candidates come from an ordered scan of events_retry_idx under the
 * LIMIT, with nothing that reads every entry first. With `analyze`, the
 * scan also stopped after the batch: at most LIMIT rows out of it, and
 * at most `stepped_over` rows it read and skipped (leases running).
 */
static void
expect_ordered_scan(const char *state, int analyze, long long stepped_over)
{
    static const char *const banned[] = {"Seq Scan", "Bitmap Heap Scan", "Bitmap Index Scan",
                                         "Sort", "Incremental Sort"};
    char *text = NULL;
    json_t *top = lease_plan(analyze, &text);
    json_t *cte = find_subplan(top, "CTE candidates");
    json_t *scan;
    const char *index;

    cr_assert(cte != NULL, "%s: no CTE candidates in the plan: %s", state, text);
    cr_assert_str_eq(json_string_value(json_object_get(cte, "Node Type")), "Limit",
                     "%s: the candidates end in their LIMIT: %s", state, text);
    for (size_t i = 0; i < sizeof(banned) / sizeof(banned[0]); i++) {
        cr_assert(find_type(cte, banned[i]) == NULL, "%s: the candidates use a %s: %s", state,
                  banned[i], text);
    }
    scan = find_type(cte, "Index Scan");
    cr_assert(scan != NULL, "%s: the candidates are not an index scan: %s", state, text);
    index = json_string_value(json_object_get(scan, "Index Name"));
    cr_assert(index != NULL && strcmp(index, "events_retry_idx") == 0,
              "%s: the candidates scan %s, not events_retry_idx: %s", state,
              index ? index : "(none)", text);
    cr_assert_str_eq(json_string_value(json_object_get(scan, "Scan Direction")), "Forward",
                     "%s: due order is the index's order: %s", state, text);
    expect_no_full_read(state, top, text);
    if (analyze) {
        long long out = json_integer_value(json_object_get(scan, "Actual Rows"));
        long long skipped = json_integer_value(json_object_get(scan, "Rows Removed by Filter"));

        cr_assert(out <= LIMIT, "%s: the scan returned %lld rows for a batch of %d: %s", state, out,
                  LIMIT, text);
        cr_assert(skipped <= stepped_over, "%s: the scan read and skipped %lld rows (<= %lld): %s",
                  state, skipped, stepped_over, text);
    }
    json_decref(top);
    free(text);
}

/* Buffers the window claim's scan touched in an analyzed claim (rolled back). */
static long long
scan_buffers(void)
{
    outbox_error err;
    json_error_t jerr;
    char *text = NULL;
    json_t *doc, *scan;
    long long blocks;

    cr_assert_eq(obx_store_claim_plan(store, LIMIT, 1, &text, &err), OUTBOX_OK, "%s", err.message);
    doc = json_loads(text, 0, &jerr);
    cr_assert(doc != NULL, "EXPLAIN JSON does not parse: %s", jerr.text);
    /* Both parts of the window's scan: a node's buffers include its children's. */
    scan = find_subplan(json_object_get(json_array_get(doc, 0), "Plan"), "CTE rest");
    cr_assert(scan != NULL, "no CTE rest: %s", text);
    blocks = json_integer_value(json_object_get(scan, "Shared Hit Blocks")) +
             json_integer_value(json_object_get(scan, "Shared Read Blocks"));
    json_decref(doc);
    free(text);
    return blocks;
}

/* The rows the nodes under `node` that read table `table` took out of it, all loops. */
static long long
rows_read(json_t *node, const char *table, const char *state, const char *text)
{
    const char *relation = json_string_value(json_object_get(node, "Relation Name"));
    const char *type = json_string_value(json_object_get(node, "Node Type"));
    long long rows = 0;
    size_t i;
    json_t *child;

    if (relation != NULL && strcmp(relation, table) == 0) {
        long long loops = json_integer_value(json_object_get(node, "Actual Loops"));

        cr_assert(type != NULL && strcmp(type, "Seq Scan") != 0 && strstr(type, "Bitmap") == NULL,
                  "%s: the health sample reads %s with a %s: %s", state, table,
                  type ? type : "(none)", text);
        rows = loops * (json_integer_value(json_object_get(node, "Actual Rows")) +
                        json_integer_value(json_object_get(node, "Rows Removed by Filter")));
    }
    json_array_foreach(json_object_get(node, "Plans"), i, child)
    {
        rows += rows_read(child, table, state, text);
    }
    return rows;
}

/*
 * The health sample, run in the store's session, reads at most `max_rows`
 * rows of outbox.events and `max_letters` of outbox.dead_letters, none of
 * them by a sequential or bitmap scan.
 */
static void
expect_bounded_reads(const char *state, long long max_rows, long long max_letters)
{
    outbox_error err;
    json_error_t jerr;
    char *text = NULL;
    json_t *doc, *top;
    long long rows, letters;
    outbox_status status = obx_store_health_plan(store, 1, &text, &err);

    cr_assert_eq(status, OUTBOX_OK, "obx_store_health_plan: %s: %s", outbox_status_name(status),
                 err.message);
    doc = json_loads(text, 0, &jerr);
    cr_assert(doc != NULL, "EXPLAIN JSON does not parse: %s", jerr.text);
    top = json_object_get(json_array_get(doc, 0), "Plan");
    cr_assert(top != NULL, "no Plan in %s", text);
    rows = rows_read(top, "events", state, text);
    letters = rows_read(top, "dead_letters", state, text);
    cr_log_info("%s: the health sample read %lld outbox rows, %lld dead letters", state, rows,
                letters);
    cr_assert_leq(rows, max_rows, "%s: the health sample read %lld outbox rows (<= %lld): %s",
                  state, rows, max_rows, text);
    cr_assert_leq(letters, max_letters,
                  "%s: the health sample read %lld dead letters (<= %lld): %s", state, letters,
                  max_letters, text);
    json_decref(doc);
    free(text);
}

/* The health sample's bound: its look at the head of the retries, the first row of the
 * windows and of the due retries, and the claims' rows. */
enum { HEALTH_HEAD = 20000, HEALTH_ROWS = HEALTH_HEAD + 2 * LIMIT + 2 };

/* The sample in a state with no dead letters. */
static void
expect_bounded_health(const char *state, long long max_rows)
{
    expect_bounded_reads(state, max_rows, 0);
}

/*
 * The window claim's two scans (the rest of the window, then the next one)
 * are ordered scans of events_window_idx under their LIMIT, with nothing
 * that reads every entry first. With `analyze`, the scan of the window's
 * rest returned at most LIMIT rows and skipped at most `stepped_over`.
 */
static void
expect_window_scan(const char *state, int analyze, long long stepped_over)
{
    static const char *const banned[] = {"Seq Scan",  "Bitmap Heap Scan", "Bitmap Index Scan",
                                         "Sort",      "Incremental Sort", "Hash Join",
                                         "Merge Join"};
    static const char *const parts[] = {"CTE rest", "CTE next"};
    outbox_error err;
    json_error_t jerr;
    char *text = NULL;
    json_t *doc, *top;
    outbox_status status = obx_store_claim_plan(store, LIMIT, analyze, &text, &err);

    cr_assert_eq(status, OUTBOX_OK, "obx_store_claim_plan: %s: %s", outbox_status_name(status),
                 err.message);
    doc = json_loads(text, 0, &jerr);
    cr_assert(doc != NULL, "EXPLAIN JSON does not parse: %s", jerr.text);
    top = json_object_get(json_array_get(doc, 0), "Plan");
    for (size_t p = 0; p < sizeof(parts) / sizeof(parts[0]); p++) {
        json_t *cte = find_subplan(top, parts[p]);
        json_t *scan;
        const char *index;

        cr_assert(cte != NULL, "%s: no %s in the claim's plan: %s", state, parts[p], text);
        cr_assert_str_eq(json_string_value(json_object_get(cte, "Node Type")), "Limit",
                         "%s: %s ends in its LIMIT: %s", state, parts[p], text);
        for (size_t i = 0; i < sizeof(banned) / sizeof(banned[0]); i++) {
            cr_assert(find_type(cte, banned[i]) == NULL, "%s: %s uses a %s: %s", state, parts[p],
                      banned[i], text);
        }
        scan = find_type(cte, "Index Scan");
        cr_assert(scan != NULL, "%s: %s is not an index scan: %s", state, parts[p], text);
        index = json_string_value(json_object_get(scan, "Index Name"));
        cr_assert(index != NULL && strcmp(index, "events_window_idx") == 0,
                  "%s: %s scans %s, not events_window_idx: %s", state, parts[p],
                  index ? index : "(none)", text);
        cr_assert(json_object_get(scan, "Index Cond") != NULL,
                  "%s: %s reads the index from its start: %s", state, parts[p], text);
        if (analyze && p == 0) {
            long long out = json_integer_value(json_object_get(scan, "Actual Rows"));
            long long skipped = json_integer_value(json_object_get(scan, "Rows Removed by Filter"));

            cr_assert(out <= LIMIT, "%s: the window scan returned %lld rows for a batch of %d: %s",
                      state, out, LIMIT, text);
            cr_assert(skipped <= stepped_over,
                      "%s: the window scan read and skipped %lld rows (<= %lld): %s", state,
                      skipped, stepped_over, text);
        }
    }
    json_decref(doc);
    free(text);
}

/* Leases once for real, and the batch is full: the plan found what is due. */
static void
expect_full_lease(const char *state)
{
    struct obx_lease lease;

    helper_lease(store, LIMIT, 60, &lease);
    cr_assert_eq(lease.count, LIMIT, "%s: a lease took %zu rows of a larger backlog", state,
                 lease.count);
    obx_lease_fini(&lease);
}

Test(lease_plan, no_statistics_yet)
{
    /* Freshly migrated, loaded, never analyzed: the state of FACTS 14's first minute. */
    load_due(20000);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM pg_stats "
                                         "WHERE schemaname = 'outbox' AND tablename = 'events'"),
                 0, "the table must have no statistics for this state");
    expect_ordered_scan("no statistics", 0, 0);
    expect_ordered_scan("no statistics", 1, 0);
    expect_window_scan("no statistics", 0, 0);
    expect_window_scan("no statistics", 1, 0);
    expect_full_lease("no statistics");
    /* The next lease steps over the running one's rows, and only those. */
    expect_ordered_scan("no statistics, one lease running", 1, LIMIT);
    expect_window_scan("no statistics, one claim running", 1, 0);
    expect_bounded_health("no statistics, one lease running", HEALTH_ROWS);
}

Test(lease_plan, right_after_a_bulk_load)
{
    /* Statistics say 50 rows; 100,000 arrive before the next analyze. */
    load_due(50);
    harness_exec(conn, "ANALYZE outbox.events");
    load_due(100000);
    expect_ordered_scan("after a bulk load", 0, 0);
    expect_ordered_scan("after a bulk load", 1, 0);
    expect_window_scan("after a bulk load", 0, 0);
    expect_window_scan("after a bulk load", 1, 0);
    expect_full_lease("after a bulk load");
    expect_bounded_health("after a bulk load", HEALTH_ROWS);
}

Test(lease_plan, large_backlog_with_fresh_statistics)
{
    /* Autovacuum has just analyzed a backlog: the statistics are right, and a generic plan
     * that assumes a lease takes 10% of them (2,000 rows) once hashed the whole primary key. */
    load_due(20000);
    harness_exec(conn, "ANALYZE outbox.events");
    expect_ordered_scan("large backlog, fresh statistics", 0, 0);
    expect_ordered_scan("large backlog, fresh statistics", 1, 0);
    expect_window_scan("large backlog, fresh statistics", 0, 0);
    expect_window_scan("large backlog, fresh statistics", 1, 0);
    expect_full_lease("large backlog, fresh statistics");
}

Test(lease_plan, dead_index_entries_between_vacuums)
{
    /* 200,000 rows relayed (pruned) since the last vacuum: each left a dead entry in
     * events_window_idx, in front of the rows due now (a relay that lost its cursor
     * starts there). Statistics from before. */
    load_due(1000);
    harness_exec(conn, "ANALYZE outbox.events");
    load_due(200000);
    harness_exec(conn, "DELETE FROM outbox.events "
                       "WHERE id IN (SELECT id FROM outbox.events "
                       "ORDER BY next_attempt_at LIMIT 200000)");
    cr_assert_eq(helper_count(conn, "published_at IS NULL"), 1000);
    expect_ordered_scan("dead entries, stale statistics", 0, 0);
    {
        /* The first ordered scan visits each dead row once and marks its entry dead; the
         * next ones skip those entries without reading the table: what keeps a lease flat
         * between vacuums (a bitmap scan never marks entries). */
        long long first = scan_buffers(), later = scan_buffers();

        cr_log_info("200,000 dead entries: the first scan read %lld buffers, the next %lld", first,
                    later);
        cr_assert_lt(later * 10, first,
                     "the second scan read %lld buffers, the first %lld: dead entries were "
                     "not skipped",
                     later, first);
    }
    expect_ordered_scan("dead entries, stale statistics", 1, 0);
    harness_exec(conn, "ANALYZE outbox.events");
    expect_ordered_scan("dead entries, fresh statistics", 0, 0);
    expect_ordered_scan("dead entries, fresh statistics", 1, 0);
    expect_window_scan("dead entries, fresh statistics", 0, 0);
    expect_window_scan("dead entries, fresh statistics", 1, 0);
    expect_full_lease("dead entries");
    expect_bounded_health("dead entries", HEALTH_ROWS);
}

Test(lease_plan, many_done_rows_retained)
{
    /* Mark mode keeps published rows for the retention: 200,000 of them, vacuumed and
     * analyzed, under a small backlog. */
    load(200000, "done", "now() - interval '2 hours'", "now() - interval '1 hour'");
    harness_exec(conn, "VACUUM ANALYZE outbox.events");
    /* They stay in events_window_idx (the mark is a HOT update), behind the floor the
     * claims that took them wrote (test_window_claim shows the claims write it). */
    harness_exec(conn, "UPDATE outbox.relay_floor SET tx = pg_current_xact_id()");
    load_due(500);
    expect_ordered_scan("done rows retained", 0, 0);
    expect_ordered_scan("done rows retained", 1, 0);
    expect_window_scan("done rows retained", 0, 0);
    expect_window_scan("done rows retained", 1, 0);
    expect_full_lease("done rows retained");
    expect_bounded_health("done rows retained", HEALTH_ROWS);
}

Test(lease_plan, a_relay_that_lost_its_cursor_starts_at_the_floor)
{
    /* 5,000 rows relayed by real claims in mark mode (published, kept, still in
     * events_window_idx), 300 written since and two claims of them open; then a crash
     * empties the unlogged cursor and claims. The first claim after it starts at the floor
     * the claims wrote: it reads waiting rows only, not the 5,000 published before. */
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_MARK, 5);
    struct obx_lease lease, open[2];
    outbox_error err;
    json_error_t jerr;
    char *text = NULL;
    json_t *doc, *rest;
    long long rows;

    load_due(5000);
    for (int i = 0; i < 5; i++) {
        helper_lease(store, 1000, 60, &lease);
        cr_assert_eq(helper_finish_all(store, &lease, OBX_ROW_DONE, NULL, &opts).done, 1000);
        obx_lease_fini(&lease);
    }
    helper_floor_past_published(conn, store);
    load_due(300);
    harness_exec(conn, "UPDATE outbox.relay_floor SET written_at = now() - interval '1 minute'");
    helper_lease(store, LIMIT, 60, &open[0]);
    helper_lease(store, LIMIT, 60, &open[1]);
    harness_exec(conn, "TRUNCATE outbox.relay_cursor, outbox.relay_claims");
    cr_assert_eq(obx_store_claim_plan(store, LIMIT, 1, &text, &err), OUTBOX_OK, "%s", err.message);
    doc = json_loads(text, 0, &jerr);
    cr_assert(doc != NULL, "EXPLAIN JSON does not parse: %s", jerr.text);
    rest = find_subplan(json_object_get(json_array_get(doc, 0), "Plan"), "CTE rest");
    cr_assert(rest != NULL, "no CTE rest: %s", text);
    rows = rows_read(rest, "events", "cursor lost", text);
    cr_log_info("cursor lost: the first claim read %lld rows", rows);
    cr_assert_leq(rows, 300, "the first claim after a lost cursor read %lld rows (<= 300): %s",
                  rows, text);
    json_decref(doc);
    free(text);
    expect_full_lease("cursor lost");
    obx_lease_fini(&open[0]);
    obx_lease_fini(&open[1]);
}

Test(lease_plan, long_backlog_in_retry_backoff)
{
    /* 100,000 rows rejected and waiting out their backoff (up to an hour), analyzed, and
     * a few hundred due now. The scan stops where next_attempt_at passes now(). */
    load(100000, "pending", "now() + interval '1 hour' * (s::float8 / 100000)", "NULL");
    load_due(300);
    harness_exec(conn, "ANALYZE outbox.events");
    expect_ordered_scan("retry backlog", 0, 0);
    expect_ordered_scan("retry backlog", 1, 0);
    expect_window_scan("retry backlog", 0, 0);
    expect_window_scan("retry backlog", 1, 0);
    {
        /* Retries that came due while the test ran go first, in a row lease of their own
         * (they are not in the windows); the fresh rows fill the next lease. */
        struct obx_lease a, b;

        helper_lease(store, LIMIT, 60, &a);
        helper_lease(store, LIMIT, 60, &b);
        cr_assert_geq(a.count + b.count, LIMIT, "retry backlog: two leases took %zu rows",
                      a.count + b.count);
        obx_lease_fini(&a);
        obx_lease_fini(&b);
    }
    expect_ordered_scan("retry backlog, one lease running", 1, LIMIT);
    expect_bounded_health("retry backlog, one lease running", HEALTH_ROWS);
}

Test(lease_plan, health_sample_of_a_long_backlog_finds_the_claims_at_its_head)
{
    /* 100,000 rows waiting (an outage just ended), one lease running and one run out an
     * hour ago (its relay died). The sample finds the oldest of them, and reads the head
     * of the due order only: it read every unpublished row before, 100,000 each 5 s. */
    struct obx_store_health h;
    struct obx_lease running, expired;
    outbox_error err;

    load_due(100000);
    helper_lease(store, LIMIT, 60, &expired);
    helper_lease(store, LIMIT, 60, &running);
    cr_assert_eq(expired.count + running.count, 2 * LIMIT);
    {
        char sql[256];

        snprintf(sql, sizeof(sql),
                 "UPDATE outbox.events SET created_at = now() - interval '2 hours' "
                 "WHERE id IN (SELECT unnest(ids) FROM outbox.relay_claims WHERE token = '%s')",
                 expired.token);
        harness_exec(conn, sql);
        snprintf(sql, sizeof(sql),
                 "UPDATE outbox.relay_claims SET expires_at = now() - interval '1 hour' "
                 "WHERE token = '%s'",
                 expired.token);
        harness_exec(conn, sql);
    }
    cr_assert_eq(obx_store_health(store, &h, &err), OUTBOX_OK, "%s", err.message);
    cr_assert(h.oldest_unconfirmed_s >= 7190 && h.oldest_unconfirmed_s <= 7300,
              "the oldest unconfirmed row is 2 hours old, the sample says %lld s",
              h.oldest_unconfirmed_s);
    cr_assert_geq(h.oldest_due_s, 3500, "the oldest due row waits an hour: %lld s", h.oldest_due_s);
    expect_bounded_health("long backlog, leases at its head", HEALTH_ROWS);
    obx_lease_fini(&running);
    obx_lease_fini(&expired);
}

Test(lease_plan, health_sample_starts_past_the_rows_published_since_the_floor_was_written)
{
    /* A claim writes the floor every 2 s at most, so at 10,000 events/s it trails the
     * windows by 20,000 published rows and more; they stay in events_window_idx (mark
     * mode). Here 50,000 of them lie above the floor, then 10 rows due for an hour, claimed
     * and not yet published. The sample read every published row above the floor, a heap
     * fetch each (0.1-0.3 s a sample under load); it starts where the cursor's window and
     * the claims out put the first row not yet published. */
    static const char published_in_window[] =
        "published_at IS NOT NULL AND tx >= coalesce((SELECT pg_snapshot_xmin(s_lo) "
        "FROM outbox.relay_cursor), '0'::xid8)";
    struct obx_store_health h;
    struct obx_lease claimed = {0};
    outbox_error err;
    char *floor = harness_scalar_text(conn, "SELECT pg_snapshot_xmin(pg_current_snapshot())");
    char sql[128];

    load(50000, "done", "now() - interval '2 hours'", "now() - interval '1 hour'");
    load_due(10);
    helper_lease(store, LIMIT, 60, &claimed);
    cr_assert_eq(claimed.count, 10);
    /* Claims that find nothing start the next windows, until the window's start is past
     * the published rows (a transaction of another test, open as a window began, holds
     * its xmin back for a while). */
    for (int i = 0; i < 100 && helper_count(conn, published_in_window) > 0; i++) {
        struct obx_lease none;

        helper_lease(store, LIMIT, 60, &none);
        cr_assert_eq(none.count, 0);
        obx_lease_fini(&none);
        harness_sleep_ms(50);
    }
    cr_assert_eq(helper_count(conn, published_in_window), 0,
                 "the window's start never passed the published rows");
    snprintf(sql, sizeof(sql), "UPDATE outbox.relay_floor SET tx = '%s'", floor);
    harness_exec(conn, sql);
    cr_assert_eq(helper_count(conn, "published_at IS NOT NULL "
                                    "AND tx >= (SELECT tx FROM outbox.relay_floor)"),
                 50000, "the floor trails the windows");
    cr_assert_eq(obx_store_health(store, &h, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_geq(h.oldest_due_s, 3500, "the claimed rows have been due an hour: %lld s",
                  h.oldest_due_s);
    expect_bounded_health("50,000 published rows above the floor", 2 * LIMIT + 2);
    free(floor);
    obx_lease_fini(&claimed);
}

/*
 * The takeover (claim_takeover.sql), as every claim runs it: it reads the
 * outbox by primary key only (a run-out claim's rows, a lookup each, which
 * the update node counts again), and its look for due retries reads the
 * head of events_retry_idx, so it costs the same however long the backlog.
 */
static void
expect_takeover_by_key(const char *state, long long max_rows)
{
    outbox_error err;
    json_error_t jerr;
    char *text = NULL;
    json_t *doc, *top, *pkey;
    long long rows;

    cr_assert_eq(obx_store_takeover_plan(store, 1, &text, &err), OUTBOX_OK, "%s", err.message);
    doc = json_loads(text, 0, &jerr);
    cr_assert(doc != NULL, "EXPLAIN JSON does not parse: %s", jerr.text);
    top = json_object_get(json_array_get(doc, 0), "Plan");
    cr_assert(find_node(top, "Index Name", "events_window_idx") == NULL,
              "%s: the takeover reads the windows' index: %s", state, text);
    pkey = find_node(top, "Index Name", "events_pkey");
    cr_assert(pkey != NULL, "%s: the takeover does not find its rows by key: %s", state, text);
    cr_assert(find_node(top, "Index Name", "events_retry_idx") != NULL,
              "%s: the look for due retries is not a scan of their index: %s", state, text);
    rows = rows_read(top, "events", state, text);
    cr_log_info("%s: the takeover read %lld outbox rows", state, rows);
    cr_assert_leq(rows, max_rows, "%s: the takeover read %lld outbox rows (<= %lld): %s", state,
                  rows, max_rows, text);
    json_decref(doc);
    free(text);
}

Test(lease_plan, takeover_of_a_claim_run_out_reads_its_rows_by_key)
{
    /* 100,000 rows waiting, two claims out, one run out (its relay died). */
    struct obx_lease running, expired;
    char sql[192];

    load_due(100000);
    helper_lease(store, LIMIT, 60, &expired);
    helper_lease(store, LIMIT, 60, &running);
    expect_takeover_by_key("no claim run out", 0);
    snprintf(sql, sizeof(sql),
             "UPDATE outbox.relay_claims SET expires_at = now() - interval '1 minute' "
             "WHERE token = '%s'",
             expired.token);
    harness_exec(conn, sql);
    expect_takeover_by_key("claim run out, no statistics", 2 * LIMIT);
    harness_exec(conn, "VACUUM ANALYZE outbox.events");
    expect_takeover_by_key("claim run out, fresh statistics", 2 * LIMIT);
    obx_lease_fini(&running);
    obx_lease_fini(&expired);
}

Test(lease_plan, health_sample_counts_waiting_dead_letters_without_reading_their_history)
{
    /* 50,000 dead letters requeued long ago (kept as history) and 3 waiting: the sample
     * counts the 3, reading those only. It read the whole table before. */
    struct obx_store_health h;
    outbox_error err;

    harness_exec(conn, "INSERT INTO outbox.dead_letters (event_id, handler, reason, requeued_at) "
                       "SELECT gen_random_uuid(), CASE WHEN g % 2 = 0 THEN '' ELSE 'h' END, "
                       "'failed', now() - interval '1 day' FROM generate_series(1, 50000) AS g");
    harness_exec(conn, "INSERT INTO outbox.dead_letters (event_id, handler, reason) "
                       "SELECT gen_random_uuid(), '', 'failed' FROM generate_series(1, 3)");
    harness_exec(conn, "ANALYZE outbox.dead_letters");
    cr_assert_eq(obx_store_health(store, &h, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_eq(h.dead_letters, 3, "the relay's waiting dead letters: %lld", h.dead_letters);
    expect_bounded_reads("dead-letter history", 0, 3);
}

/*
 * A pass's first prune batch (analyzed, rolled back) takes a full batch and
 * reads at most `max_rows` outbox rows to choose it, none by a sequential
 * or bitmap scan or behind a sort; the rows not in the key range come from
 * an ordered scan of events_off_key_order_idx.
 */
static void
expect_bounded_prune(const char *state, int retention_seconds, long long max_rows)
{
    static const char *const banned[] = {"Sort", "Incremental Sort"};
    outbox_error err;
    json_error_t jerr;
    char *text = NULL;
    json_t *doc, *top, *old, *off;
    long long rows;
    outbox_status status = obx_store_prune_plan(store, retention_seconds, LIMIT, 1, &text, &err);

    cr_assert_eq(status, OUTBOX_OK, "obx_store_prune_plan: %s: %s", outbox_status_name(status),
                 err.message);
    doc = json_loads(text, 0, &jerr);
    cr_assert(doc != NULL, "EXPLAIN JSON does not parse: %s", jerr.text);
    top = json_object_get(json_array_get(doc, 0), "Plan");
    old = find_subplan(top, "CTE old");
    cr_assert(old != NULL, "%s: no CTE old in the prune: %s", state, text);
    for (size_t i = 0; i < sizeof(banned) / sizeof(banned[0]); i++) {
        cr_assert(find_type(old, banned[i]) == NULL, "%s: the prune uses a %s: %s", state,
                  banned[i], text);
    }
    off = find_node(old, "Index Name", "events_off_key_order_idx");
    cr_assert(off != NULL, "%s: the rows off the key range are not read by their index: %s", state,
              text);
    cr_assert(json_object_get(off, "Index Cond") != NULL,
              "%s: the index of the rows off the key range is read whole: %s", state, text);
    cr_assert_eq(json_integer_value(json_object_get(old, "Actual Rows")), LIMIT,
                 "%s: the batch is not full: %s", state, text);
    rows = rows_read(old, "events", state, text);
    cr_log_info("%s: the prune batch read %lld outbox rows", state, rows);
    cr_assert_leq(rows, max_rows, "%s: the prune batch read %lld outbox rows (<= %lld): %s", state,
                  rows, max_rows, text);
    json_decref(doc);
    free(text);
}

Test(lease_plan, prune_reads_the_due_rows_of_a_foreign_writer_only)
{
    /* A foreign writer's gen_random_uuid() ids sort anywhere: 100,000 of its rows were
     * published within the retention (2 hours), 300 before it, beside 100,000 of our
     * own published within it. A batch takes 100 of the 300 through their index, in
     * created_at order, and reads none of the rows not yet due there. The few random
     * ids that read as a time before the cutoff (0.6 %) are in the key range: read
     * there, and counted in the bound. */
    long long in_range;

    load(100000, "done", "now() - interval '2 hours'", "now() - interval '1 hour'");
    load_ids(100000, "gen_random_uuid()", "done", "now() - interval '2 hours'",
             "now() - interval '1 hour'");
    load_ids(300, "gen_random_uuid()", "done", "now() - interval '4 hours'",
             "now() - interval '3 hours'");
    in_range =
        harness_scalar_ll(conn, "SELECT count(*) FROM outbox.events "
                                "WHERE id < outbox.uuid_v7_floor(now() - interval '2 hours')");
    expect_bounded_prune("foreign ids, no statistics", 7200, in_range + 2 * LIMIT);
    harness_exec(conn, "VACUUM ANALYZE outbox.events");
    expect_bounded_prune("foreign ids, fresh statistics", 7200, in_range + 2 * LIMIT);
}

/*
 * A claim of an ordered schema's rows hands them out from its runs as they
 * are: the plan of `out` joins nothing. A join of two CTEs is planned from
 * their guessed sizes, and was a nested loop comparing every row of the
 * batch with every other (250,000 comparisons, 56 of a 79 ms claim of 500).
 */
Test(lease_plan, an_ordered_claim_joins_no_ctes_to_hand_out_its_rows)
{
    static const char *const joins[] = {"Nested Loop", "Hash Join", "Merge Join"};
    outbox_error err;
    json_error_t jerr;
    char *text = NULL;
    json_t *doc, *out;

    load_due(1000);
    /* Each row the head of its own aggregate, numbered as an ordered writer would. */
    harness_exec(conn, "ALTER TABLE outbox.events DISABLE TRIGGER USER");
    harness_exec(conn, "UPDATE outbox.events SET aggregate_id = gen_random_uuid(), "
                       "aggregate_seq = 1");
    harness_exec(conn, "ALTER TABLE outbox.events ENABLE ALWAYS TRIGGER events_row_valid");
    harness_exec(conn, "ALTER TABLE outbox.events ENABLE TRIGGER events_wakeup");
    harness_exec(conn, "ANALYZE outbox.events");
    cr_assert_eq(obx_store_claim_plan(store, LIMIT, 1, &text, &err), OUTBOX_OK, "%s", err.message);
    doc = json_loads(text, 0, &jerr);
    cr_assert(doc != NULL, "EXPLAIN JSON does not parse: %s", jerr.text);
    out = find_subplan(json_object_get(json_array_get(doc, 0), "Plan"), "CTE out");
    cr_assert(out != NULL, "no CTE out: %s", text);
    cr_assert_eq(json_integer_value(json_object_get(out, "Actual Rows")), LIMIT,
                 "the claim hands out a full batch: %s", text);
    for (size_t i = 0; i < sizeof(joins) / sizeof(joins[0]); i++) {
        cr_assert(find_type(out, joins[i]) == NULL, "the claim's out uses a %s: %s", joins[i],
                  text);
    }
    json_decref(doc);
    free(text);
}
