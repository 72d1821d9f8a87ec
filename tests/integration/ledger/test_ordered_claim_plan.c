/* SPDX-License-Identifier: MIT */
/*
 * test_ordered_claim_plan.c - the ordered claim's common batch
 * (ledger_claim_ordered(), migrations 0025 and 0026) reads one progress row per
 * aggregate of the batch, however many rows the handler has: its update
 * finds each row by its key, the batch's aggregates leading the plan. A
 * plan that joined the batch to the table by a hash or merge join would
 * read every row of the handler per batch (20,000 here), and one that
 * scanned the table per aggregate, 20,000 per aggregate.
 *
 * Checked with the server's own counters of the claim's transaction
 * (pg_stat_xact_user_tables, before and after the call): rows read by scans of handler_progress,
 * rows fetched through its indexes, rows updated; without statistics (a fresh table, autovacuum
 * off), with them, and with the custom and the generic plan the function's cached statement ends up
 * with.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>

#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum {
    HANDLER_ROWS = 20000, /* progress rows of the handler */
    BATCH = 50,           /* aggregates of each claimed batch, spread over the key order */
    READS_PER_AGG = 2,    /* rows a batch may read per aggregate */
    CALLS = 7,            /* per plan mode: past the five custom plans a cached statement tries */
};

static PGconn *conn;
static int round_no; /* the number each batch's events carry: every round moves the rows on one */

static void
setup(void)
{
    char sql[512];

    conn = harness_pg_connect_fresh();
    harness_exec(conn, "ALTER TABLE outbox.handler_progress SET (autovacuum_enabled = off)");
    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox.handler_progress (handler, aggregate_type, aggregate_id, "
             "last_seq) SELECT 'plan', 'order', ('22222222-2222-4222-8222-' || "
             "lpad(n::text, 12, '0'))::uuid, 0 FROM generate_series(1, %d) AS n",
             HANDLER_ROWS);
    harness_exec(conn, sql);
    /* The handler's order starts before its events: none is taken for a past one. */
    harness_exec(conn, "SELECT outbox.ledger_order_baseline('plan')");
    round_no = 0;
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(ordered_claim_plan, .init = setup, .fini = teardown, .timeout = 120);

struct batch_counts {
    long long ran, scanned, fetched, updated;
};

/* One of this transaction's counters of handler_progress, so far. */
static long long
xact_counter(const char *column)
{
    char sql[256];

    snprintf(sql, sizeof(sql),
             "SELECT coalesce(%s, 0) FROM pg_stat_xact_user_tables WHERE schemaname = 'outbox' "
             "AND relname = 'handler_progress'",
             column);
    return harness_scalar_ll(conn, sql);
}

/*
 * Claims, as done, one batch of the next event of BATCH aggregates spread
 * over the key order, and reads this transaction's counters of
 * handler_progress before committing.
 */
static struct batch_counts
claim_batch(void)
{
    struct batch_counts c, before;
    char sql[1024];

    round_no++;
    harness_exec(conn, "BEGIN");
    /* The view adds the counts not yet sent to the server's statistics: a difference, then. */
    before.scanned = xact_counter("seq_tup_read");
    before.fetched = xact_counter("idx_tup_fetch");
    before.updated = xact_counter("n_tup_upd");
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FILTER (WHERE c.state = 'run') FROM outbox.ledger_claim_ordered("
             "'plan', ARRAY(SELECT gen_random_uuid() FROM generate_series(1, %d)), 30, 1000, "
             "true, array_fill('order'::text, ARRAY[%d]), ARRAY(SELECT ('22222222-2222-4222-8222-' "
             "|| lpad((1 + (n * 397) %% %d)::text, 12, '0'))::uuid FROM generate_series(1, %d) "
             "AS n ORDER BY n), array_fill(%d::bigint, ARRAY[%d]), NULL, NULL, NULL) AS c",
             BATCH, BATCH, HANDLER_ROWS, BATCH, round_no, BATCH);
    c.ran = harness_scalar_ll(conn, sql);
    c.scanned = xact_counter("seq_tup_read") - before.scanned;
    c.fetched = xact_counter("idx_tup_fetch") - before.fetched;
    c.updated = xact_counter("n_tup_upd") - before.updated;
    harness_exec(conn, "COMMIT");
    return c;
}

static void
expect_reads_per_aggregate(const char *state)
{
    static const char *const modes[] = {"force_custom_plan", "force_generic_plan", "auto"};
    char sql[128];

    for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
        snprintf(sql, sizeof(sql), "SET plan_cache_mode = %s", modes[m]);
        harness_exec(conn, sql);
        for (int i = 0; i < CALLS; i++) {
            struct batch_counts c = claim_batch();

            cr_log_info("%s, %s, batch %d: %lld rows scanned, %lld fetched by index, %lld "
                        "updated",
                        state, modes[m], round_no, c.scanned, c.fetched, c.updated);
            cr_assert_eq(c.ran, BATCH, "%s (%s): %lld of the batch's %d events run", state,
                         modes[m], c.ran, BATCH);
            cr_assert_eq(c.updated, BATCH, "%s (%s): %lld progress rows moved on, not %d", state,
                         modes[m], c.updated, BATCH);
            cr_assert_leq(c.scanned + c.fetched, (long long)READS_PER_AGG * BATCH,
                          "%s (%s): a batch of %d aggregates read %lld rows of handler_progress "
                          "(%lld by scans, %lld through an index); the handler has %d",
                          state, modes[m], BATCH, c.scanned + c.fetched, c.scanned, c.fetched,
                          HANDLER_ROWS);
        }
    }
    harness_exec(conn, "RESET plan_cache_mode");
}

Test(ordered_claim_plan, a_batch_reads_one_progress_row_per_aggregate)
{
    expect_reads_per_aggregate("no statistics");
    harness_exec(conn, "ANALYZE outbox.handler_progress");
    expect_reads_per_aggregate("with statistics");
}

/*
 * Statistics taken while the handler had one progress row (a new handler
 * whose first aggregate was analyzed, or a table emptied and refilled
 * since) say its column is unique: a handler's rows are estimated at one,
 * as the batch's aggregates are. Seen in outbox-bench: a plan that read
 * the handler's every row per aggregate of the batch, 0.5 s a claim over
 * 10,000 rows, until the next ANALYZE.
 */
Test(ordered_claim_plan, a_batch_reads_one_progress_row_per_aggregate_with_statistics_of_one_row)
{
    harness_exec(conn, "CREATE TEMP TABLE rest AS SELECT * FROM outbox.handler_progress WHERE "
                       "aggregate_id <> '22222222-2222-4222-8222-000000000001'");
    harness_exec(conn, "DELETE FROM outbox.handler_progress WHERE aggregate_id <> "
                       "'22222222-2222-4222-8222-000000000001'");
    harness_exec(conn, "VACUUM ANALYZE outbox.handler_progress");
    harness_exec(conn, "INSERT INTO outbox.handler_progress SELECT * FROM rest");
    expect_reads_per_aggregate("statistics of one row");
}
