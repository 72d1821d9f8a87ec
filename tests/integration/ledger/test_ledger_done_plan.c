/* SPDX-License-Identifier: MIT */
/*
 * test_ledger_done_plan.c - a done mark (sql/queries/ledger_mark_done.sql
 * and ledger_mark_done_ordered.sql) reads each claim of its batch by its
 * key, however many rows the ledger holds and whatever its statistics say.
 *
 * The ledger sends its statements unnamed, so each call is planned with
 * the batch's real length. Written as a join of the batch's arrays to
 * processed_events, the planner priced a sequential scan of the whole
 * ledger under a batch of key lookups on tables from a few thousand rows
 * up (outbox-bench consume --case http: 42 ms a done mark of 500 claims
 * over 40,000 rows, the statement that took most of PostgreSQL's time).
 *
 * Checked as the consumer runs it (PQexecParams of the statement's text,
 * a batch of BATCH fresh claims among LEDGER_ROWS finished ones) with the
 * server's counters of the statement's transaction
 * (pg_stat_xact_user_tables): rows read by scans of processed_events and
 * rows fetched through its indexes. Without statistics, with them, and
 * with statistics taken at half the table's size (autovacuum behind).
 *
 * And what it writes: a claim inserts its rows side by side and the done
 * mark updates them all in one statement, so each page must keep room for
 * a new version of every row on it, or the update leaves the page and
 * writes new entries in every index (migration 0033). Checked with the
 * longest handler name allowed: the longer the rows, the less room.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sql.h"
#include "harness.h"
#include "ledger_helpers.h"
#include "sql_gen.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum {
    LEDGER_ROWS = 40000, /* finished claims of the handler already in the ledger */
    BATCH = 500,         /* claims marked done by one statement: the consumer's batch */
    CALLS = 3,           /* done marks per statement and state */
};

static PGconn *conn;
static const char *handler = "plan"; /* the ledger rows' handler */

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    harness_exec(conn, "ALTER TABLE outbox.processed_events SET (autovacuum_enabled = off)");
    harness_exec(conn, "CREATE TEMP TABLE batch (n int, id uuid, token uuid)");
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(ledger_done_plan, .init = setup, .fini = teardown, .timeout = 120);

/* BATCH new claims of the handler, in progress under their own tokens, kept in `batch`. */
static void
claim_batch(void)
{
    char sql[512];

    harness_exec(conn, "TRUNCATE batch");
    snprintf(sql, sizeof(sql),
             "INSERT INTO batch SELECT n, gen_random_uuid(), gen_random_uuid() "
             "FROM generate_series(1, %d) AS n",
             BATCH);
    harness_exec(conn, sql);
    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox.processed_events (event_id, handler, status, owner_token, "
             "started_at, claimed_until) SELECT id, '%s', 'in_progress', token, now(), "
             "now() + interval '30 seconds' FROM batch",
             handler);
    harness_exec(conn, sql);
}

/*
 * Marks the batch done with `statement` as the ledger sends it, ordered
 * (six arrays) or not (three); returns the rows it read of processed_events
 * and checks it marked the whole batch. `hot`, if not NULL: how many of its
 * updates were HOT.
 */
static long long
mark_batch_done(const char *template, int ordered, const char *state, long long *hot)
{
    char *statement = obx_sql_render(template, "outbox.");
    char *ids = harness_scalar_text(conn, "SELECT array_agg(id ORDER BY n) FROM batch");
    char *tokens = harness_scalar_text(conn, "SELECT array_agg(token ORDER BY n) FROM batch");
    char *types = harness_scalar_text(conn, "SELECT array_agg('order'::text) FROM batch");
    char *aggs = harness_scalar_text(conn, "SELECT array_agg(id ORDER BY n) FROM batch");
    char *seqs = harness_scalar_text(conn, "SELECT array_agg(1::bigint) FROM batch");
    const char *params[6] = {handler, ids, tokens, types, aggs, seqs};
    long long scanned, fetched, marked;
    PGresult *res;

    cr_assert(statement != NULL && ids != NULL && tokens != NULL);
    harness_exec(conn, "BEGIN");
    scanned = helper_xact_counter(conn, "processed_events", "seq_tup_read");
    fetched = helper_xact_counter(conn, "processed_events", "idx_tup_fetch");
    if (hot != NULL) {
        *hot = -helper_xact_counter(conn, "processed_events", "n_tup_hot_upd");
    }
    res = PQexecParams(conn, statement, ordered ? 6 : 3, NULL, params, NULL, NULL, 0);
    cr_assert(PQresultStatus(res) == PGRES_TUPLES_OK || PQresultStatus(res) == PGRES_COMMAND_OK,
              "%s: the done mark failed: %s", state, PQresultErrorMessage(res));
    marked = strtoll(ordered ? PQgetvalue(res, 0, 0) : PQcmdTuples(res), NULL, 10);
    PQclear(res);
    scanned = helper_xact_counter(conn, "processed_events", "seq_tup_read") - scanned;
    fetched = helper_xact_counter(conn, "processed_events", "idx_tup_fetch") - fetched;
    if (hot != NULL) {
        *hot += helper_xact_counter(conn, "processed_events", "n_tup_hot_upd");
    }
    harness_exec(conn, "COMMIT");
    cr_assert_eq(marked, BATCH, "%s: %lld of the batch's %d claims marked done", state, marked,
                 BATCH);
    free(statement);
    free(ids);
    free(tokens);
    free(types);
    free(aggs);
    free(seqs);
    cr_log_info("%s: %lld rows scanned, %lld fetched by index", state, scanned, fetched);
    return scanned + fetched;
}

static void
expect_reads_per_claim(const char *state)
{
    static const char *const kinds[] = {"unordered", "ordered"};
    const char *templates[] = {obx_sql_ledger_mark_done, obx_sql_ledger_mark_done_ordered};
    char what[128];

    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < CALLS; i++) {
            long long reads;

            snprintf(what, sizeof(what), "%s, %s done mark %d", state, kinds[k], i + 1);
            claim_batch();
            reads = mark_batch_done(templates[k], k, what, NULL);
            cr_assert_leq(reads, 2LL * BATCH,
                          "%s: marking %d claims done read %lld rows of processed_events, which "
                          "holds %lld",
                          what, BATCH, reads,
                          harness_scalar_ll(conn, "SELECT count(*) FROM outbox.processed_events"));
        }
    }
}

Test(ledger_done_plan, a_done_mark_reads_its_claims_by_key_without_statistics)
{
    helper_finished_claims(conn, "plan", LEDGER_ROWS);
    expect_reads_per_claim("no statistics");
}

Test(ledger_done_plan, a_done_mark_reads_its_claims_by_key_with_statistics)
{
    helper_finished_claims(conn, "plan", LEDGER_ROWS);
    harness_exec(conn, "ANALYZE outbox.processed_events");
    expect_reads_per_claim("with statistics");
}

/* The bench's state: analyzed at half the size, then grown (autovacuum not yet by). */
Test(ledger_done_plan, a_done_mark_reads_its_claims_by_key_with_statistics_of_half_the_table)
{
    helper_finished_claims_analyzed_at_half(conn, "plan", LEDGER_ROWS);
    expect_reads_per_claim("statistics of half the table");
}

/*
 * A done mark of a whole claimed batch is HOT: every row's new version on
 * its own page (pg_stat_xact_user_tables of the done mark's transaction),
 * unordered and ordered.
 */
Test(ledger_done_plan, a_done_mark_of_a_whole_claimed_batch_updates_no_index)
{
    static const char *const kinds[] = {"unordered", "ordered"};
    const char *templates[] = {obx_sql_ledger_mark_done, obx_sql_ledger_mark_done_ordered};

    /* the longest name the ledger allows (processed_events_handler_name) */
    handler = "h234567890123456789012345678901234567890123456789012345678901234";
    cr_assert_eq(strlen(handler), 64);
    helper_finished_claims(conn, "plan", LEDGER_ROWS / 10);
    for (int k = 0; k < 2; k++) {
        long long hot;

        claim_batch();
        (void)mark_batch_done(templates[k], k, kinds[k], &hot);
        cr_log_info("%s: %lld of %d updates HOT", kinds[k], hot, BATCH);
        cr_assert_eq(hot, BATCH, "%s done mark: %lld of its %d updates were HOT", kinds[k], hot,
                     BATCH);
    }
}
