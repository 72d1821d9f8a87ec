/* SPDX-License-Identifier: MIT */
/*
 * test_parked_plan.c - a sweep's take of parked events
 * (sql/queries/ledger_parked_take.sql) reads per aggregate, not per parked
 * row: behind one dead head, 20,000 events of one handler wait for ever,
 * beside a few aggregates whose next events are ready. Each sweep (once a
 * second on every replica) must lease the ready ones without reading the
 * 20,000: the statement's plan, run by EXPLAIN (ANALYZE, FORMAT JSON) in a
 * transaction rolled back, with and without statistics and as the generic
 * plan a prepared statement ends up with, reads at most a few rows of
 * parked_events per aggregate. The take through the ledger leases exactly
 * the ready chains, in aggregate and number order.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sql.h"
#include "harness.h"
#include "ledger/ledger.h"
#include "ledger_helpers.h"
#include "sql_gen.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum {
    BEHIND_DEAD_HEAD = 20000, /* parked behind the dead head, numbers 2 .. 20001 */
    READY_AGGS = 3,           /* aggregates done up to 3, with 4, 5, 6 parked */
    BLOCKED_AGGS = 5,         /* aggregates done up to 1, with 3, 4 parked (2 not done) */
    READ_BOUND = 200,         /* rows of parked_events a take may read here, at most */
};

static const char dead_agg[] = "11111111-1111-4111-8111-111111111111";

static PGconn *conn;

static void
setup(void)
{
    char sql[1024];

    conn = harness_pg_connect_fresh();
    harness_exec(conn, "ALTER TABLE outbox.parked_events SET (autovacuum_enabled = off)");
    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox.parked_events (handler, event_id, aggregate_type, aggregate_id, "
             "aggregate_seq, message_id, subject, envelope) "
             "SELECT 'audit', gen_random_uuid(), 'order', '%s', s, 'dead/' || s, "
             "'outbox.order.changed', repeat('x', 300) FROM generate_series(2, %d) AS s",
             dead_agg, BEHIND_DEAD_HEAD + 1);
    harness_exec(conn, sql);
    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox.handler_progress (handler, aggregate_type, aggregate_id, "
             "last_seq) VALUES ('audit', 'order', '%s', 0)",
             dead_agg);
    harness_exec(conn, sql);
    /* Ready aggregates sort after the dead one: its rows come first in index order. */
    snprintf(
        sql, sizeof(sql),
        "WITH a AS (SELECT ('22222222-2222-4222-8222-' || lpad(n::text, 12, '0'))::uuid AS id, "
        "CASE WHEN n <= %d THEN 3 ELSE 1 END AS done FROM generate_series(1, %d) AS n), "
        "p AS (INSERT INTO outbox.handler_progress (handler, aggregate_type, aggregate_id, "
        "last_seq) SELECT 'audit', 'order', id, done FROM a RETURNING aggregate_id, last_seq) "
        "INSERT INTO outbox.parked_events (handler, event_id, aggregate_type, aggregate_id, "
        "aggregate_seq, message_id, subject, envelope) "
        "SELECT 'audit', gen_random_uuid(), 'order', p.aggregate_id, p.last_seq + s, "
        "CASE WHEN p.last_seq = 3 THEN 'ready/' ELSE 'blocked/' END || p.last_seq + s, "
        "'outbox.order.changed', repeat('y', 300) "
        "FROM p, generate_series(1, 3) AS s WHERE p.last_seq = 3 OR s > 1",
        READY_AGGS, READY_AGGS + BLOCKED_AGGS);
    harness_exec(conn, sql);
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(parked_plan, .init = setup, .fini = teardown, .timeout = 120);

/* Rows the scans of `table` under `node` read: returned or filtered out, every loop. */
static long long
rows_read(json_t *node, const char *table)
{
    const char *rel = json_string_value(json_object_get(node, "Relation Name"));
    const char *type = json_string_value(json_object_get(node, "Node Type"));
    long long n = 0;
    size_t i;
    json_t *child;

    if (rel != NULL && strcmp(rel, table) == 0 && type != NULL && strstr(type, "Scan") != NULL) {
        n += (json_integer_value(json_object_get(node, "Actual Rows")) +
              json_integer_value(json_object_get(node, "Rows Removed by Filter"))) *
             json_integer_value(json_object_get(node, "Actual Loops"));
    }
    json_array_foreach(json_object_get(node, "Plans"), i, child)
    {
        n += rows_read(child, table);
    }
    return n;
}

/*
 * Runs the take's plan with ANALYZE in a transaction rolled back (the
 * prepared statement, generic with `generic`); returns the rows of
 * parked_events it read, the rows of handler_progress in `progress`, and
 * how many it leased in `leased`.
 */
static long long
take_reads(int generic, long long *leased, long long *progress)
{
    char *sql = obx_sql_render(obx_sql_ledger_parked_take, "outbox.");
    char *prepare = NULL;
    json_error_t jerr;
    json_t *doc, *top;
    PGresult *res;
    long long n;
    size_t len;

    cr_assert_not_null(sql);
    len = strlen(sql) + 64;
    prepare = malloc(len);
    cr_assert_not_null(prepare);
    snprintf(prepare, len, "PREPARE take(text, integer, integer) AS %s", sql);
    harness_exec(conn, "DEALLOCATE ALL");
    harness_exec(conn, prepare);
    harness_exec(conn, generic ? "SET plan_cache_mode = force_generic_plan"
                               : "SET plan_cache_mode = auto");
    harness_exec(conn, "BEGIN");
    res = PQexec(conn, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE take('audit', 100, 10)");
    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQerrorMessage(conn));
    doc = json_loads(PQgetvalue(res, 0, 0), 0, &jerr);
    cr_assert_not_null(doc, "EXPLAIN JSON does not parse: %s", jerr.text);
    top = json_object_get(json_array_get(doc, 0), "Plan");
    n = rows_read(top, "parked_events");
    *progress = rows_read(top, "handler_progress");
    *leased = json_integer_value(json_object_get(top, "Actual Rows"));
    cr_log_info("%s plan: %lld rows of parked_events read, %lld of handler_progress, %lld "
                "leased, %.3f ms, %lld buffers",
                generic ? "generic" : "custom", n, *progress, *leased,
                json_real_value(json_object_get(json_array_get(doc, 0), "Execution Time")),
                json_integer_value(json_object_get(top, "Shared Hit Blocks")) +
                    json_integer_value(json_object_get(top, "Shared Read Blocks")));
    if (n > READ_BOUND || *progress > READ_BOUND) {
        cr_log_error("%s", PQgetvalue(res, 0, 0));
    }
    json_decref(doc);
    PQclear(res);
    harness_exec(conn, "ROLLBACK");
    harness_exec(conn, "RESET plan_cache_mode");
    free(prepare);
    free(sql);
    return n;
}

static void
expect_reads_per_aggregate(const char *state)
{
    for (int generic = 0; generic <= 1; generic++) {
        long long leased = 0, progress = 0, n = take_reads(generic, &leased, &progress);

        cr_assert_eq(leased, READY_AGGS * 3, "%s: the ready chains are leased", state);
        cr_assert_leq(n, READ_BOUND,
                      "%s (%s plan): the take read %lld parked rows; it must not read the %d "
                      "behind the dead head",
                      state, generic ? "generic" : "custom", n, BEHIND_DEAD_HEAD);
        cr_assert_leq(progress, READ_BOUND,
                      "%s (%s plan): the take read %lld progress rows; it needs the heads' only",
                      state, generic ? "generic" : "custom", progress);
    }
}

Test(parked_plan, a_take_reads_per_aggregate_not_the_events_behind_a_dead_head)
{
    expect_reads_per_aggregate("no statistics");
    harness_exec(conn, "ANALYZE outbox.parked_events");
    harness_exec(conn, "ANALYZE outbox.handler_progress");
    expect_reads_per_aggregate("with statistics");
}

/*
 * The handler has 20,000 more progress rows (aggregates with nothing
 * parked), and statistics taken while it had one (its column then looks
 * unique: its rows are estimated at one, as the heads are). The take must
 * still read the heads' progress rows only, not the handler's every row.
 */
Test(parked_plan, a_take_reads_the_heads_progress_with_statistics_of_one_row)
{
    harness_exec(conn, "INSERT INTO outbox.handler_progress (handler, aggregate_type, "
                       "aggregate_id, last_seq) SELECT 'audit', 'order', gen_random_uuid(), 5 "
                       "FROM generate_series(1, 20000)");
    harness_exec(conn, "CREATE TEMP TABLE rest AS SELECT * FROM outbox.handler_progress WHERE "
                       "aggregate_id <> '11111111-1111-4111-8111-111111111111'");
    harness_exec(conn, "DELETE FROM outbox.handler_progress WHERE aggregate_id <> "
                       "'11111111-1111-4111-8111-111111111111'");
    harness_exec(conn, "VACUUM ANALYZE outbox.handler_progress");
    harness_exec(conn, "INSERT INTO outbox.handler_progress SELECT * FROM rest");
    expect_reads_per_aggregate("progress statistics of one row");
}

Test(parked_plan, the_take_leases_the_ready_chains_in_aggregate_and_number_order)
{
    struct obx_ledger *ledger = helper_ledger_open("parked-plan-test");
    struct obx_parked_set set = {0};
    outbox_error err;

    LEDGER_OK(obx_ledger_parked_take(ledger, "audit", 100, 30, &set, &err));
    cr_assert_eq(set.count, READY_AGGS * 3);
    for (size_t i = 0; i < set.count; i++) {
        char want[16];

        snprintf(want, sizeof(want), "ready/%zu", 4 + i % 3);
        cr_assert_str_eq(set.rows[i].message_id, want, "row %zu", i);
    }
    obx_parked_set_fini(&set);
    LEDGER_OK(obx_ledger_parked_take(ledger, "audit", 100, 30, &set, &err));
    cr_assert_eq(set.count, 0, "leased already, and the rest wait");
    obx_parked_set_fini(&set);
    obx_ledger_close(ledger);
}
