/* SPDX-License-Identifier: MIT */
/*
 * test_ledger_claim_plan.c - a claim of events that have ledger rows
 * already (sql/queries/ledger_claim_fresh.sql, whose others go through
 * ledger_claim(): redeliveries, retries; receive(), claim() and try_claim()
 * go through it too) reads each row by its key, however many rows the
 * ledger holds and whatever its statistics say.
 *
 * Left to the planner, a batch of 500 joined to a ledger of 20,000 to
 * about 100,000 rows with fresh statistics was a hash join over a scan of
 * the handler's every row (a probe is priced as a read from disk); with
 * statistics that put the table at a row or two, at any size (migration
 * 0037).
 *
 * Checked as the consumer runs it (PQexecParams of the statement's text)
 * with the server's counters of the statement's transaction
 * (pg_stat_xact_user_tables): rows read by scans of processed_events and
 * rows fetched through its indexes, for a batch of BATCH claims whose
 * leases ran out among LEDGER_ROWS finished ones. Without statistics, with
 * them, with statistics of half the table, and with statistics of one row
 * counted over the pages of many (taken while another session's snapshot
 * kept the deleted rows).
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
    BATCH = 500,         /* claims of one statement: the consumer's batch */
    CALLS = 3,           /* claims per state */
    READS_PER_CLAIM = 5, /* the batch's own rows, each read a few times by key */
};

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    harness_exec(conn, "ALTER TABLE outbox.processed_events SET (autovacuum_enabled = off)");
    harness_exec(conn, "CREATE TEMP TABLE batch (n int, id uuid)");
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(ledger_claim_plan, .init = setup, .fini = teardown, .timeout = 120);

/* BATCH claims of the handler whose leases ran out: each event is redelivered. */
static void
expired_batch(void)
{
    char sql[512];

    harness_exec(conn, "TRUNCATE batch");
    snprintf(sql, sizeof(sql),
             "INSERT INTO batch SELECT n, gen_random_uuid() FROM generate_series(1, %d) AS n",
             BATCH);
    harness_exec(conn, sql);
    harness_exec(conn, "INSERT INTO outbox.processed_events (event_id, handler, status, "
                       "owner_token, started_at, claimed_until) SELECT id, 'plan', "
                       "'in_progress', gen_random_uuid(), now() - interval '1 minute', "
                       "now() - interval '30 seconds' FROM batch");
}

/* Claims the batch as the consumer does; returns the rows it read of processed_events. */
static long long
claim_batch(const char *state)
{
    char *statement = obx_sql_render(obx_sql_ledger_claim_fresh, "outbox.");
    char *ids = harness_scalar_text(conn, "SELECT array_agg(id ORDER BY n) FROM batch");
    const char *params[5] = {"plan", ids, "30", "1000", "false"};
    long long scanned, fetched;
    int run = 0;
    PGresult *res;

    cr_assert(statement != NULL && ids != NULL);
    harness_exec(conn, "BEGIN");
    scanned = helper_xact_counter(conn, "processed_events", "seq_tup_read");
    fetched = helper_xact_counter(conn, "processed_events", "idx_tup_fetch");
    res = PQexecParams(conn, statement, 5, NULL, params, NULL, NULL, 0);
    cr_assert(PQresultStatus(res) == PGRES_TUPLES_OK, "%s: the claim failed: %s", state,
              PQresultErrorMessage(res));
    for (int i = 0; i < PQntuples(res); i++) {
        run += strcmp(PQgetvalue(res, i, 1), "run") == 0;
    }
    PQclear(res);
    scanned = helper_xact_counter(conn, "processed_events", "seq_tup_read") - scanned;
    fetched = helper_xact_counter(conn, "processed_events", "idx_tup_fetch") - fetched;
    harness_exec(conn, "COMMIT");
    cr_assert_eq(run, BATCH, "%s: %d of the batch's %d expired claims taken again", state, run,
                 BATCH);
    free(statement);
    free(ids);
    cr_log_info("%s: %lld rows scanned, %lld fetched by index", state, scanned, fetched);
    return scanned + fetched;
}

static void
expect_reads_per_claim(const char *state)
{
    char what[128];

    for (int i = 0; i < CALLS; i++) {
        long long reads;

        snprintf(what, sizeof(what), "%s, claim %d", state, i + 1);
        expired_batch();
        reads = claim_batch(what);
        cr_assert_leq(reads, (long long)READS_PER_CLAIM * BATCH,
                      "%s: claiming %d redelivered events read %lld rows of processed_events, "
                      "which holds %lld",
                      what, BATCH, reads,
                      harness_scalar_ll(conn, "SELECT count(*) FROM outbox.processed_events"));
    }
}

Test(ledger_claim_plan, a_claim_reads_its_rows_by_key_without_statistics)
{
    helper_finished_claims(conn, "plan", LEDGER_ROWS);
    expect_reads_per_claim("no statistics");
}

/* The state a ledger is in most of the time: the planner priced a scan below the probes. */
Test(ledger_claim_plan, a_claim_reads_its_rows_by_key_with_statistics)
{
    helper_finished_claims(conn, "plan", LEDGER_ROWS);
    harness_exec(conn, "ANALYZE outbox.processed_events");
    expect_reads_per_claim("with statistics");
}

Test(ledger_claim_plan, a_claim_reads_its_rows_by_key_with_statistics_of_half_the_table)
{
    helper_finished_claims_analyzed_at_half(conn, "plan", LEDGER_ROWS);
    expect_reads_per_claim("statistics of half the table");
}

/*
 * Statistics of one row over the pages of many: ANALYZE ran after a prune
 * emptied the handler while another session's snapshot kept the deleted
 * rows (their pages stay), then the ledger filled again.
 */
Test(ledger_claim_plan, a_claim_reads_its_rows_by_key_with_statistics_of_one_row_over_many_pages)
{
    PGconn *other = helper_connect();

    helper_finished_claims(conn, "plan", LEDGER_ROWS);
    harness_exec(other, "BEGIN ISOLATION LEVEL REPEATABLE READ");
    harness_exec(other, "SELECT count(*) FROM outbox.processed_events");
    harness_exec(conn, "DELETE FROM outbox.processed_events WHERE event_id <> (SELECT "
                       "event_id FROM outbox.processed_events LIMIT 1)");
    harness_exec(conn, "VACUUM ANALYZE outbox.processed_events");
    harness_exec(other, "COMMIT");
    PQfinish(other);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT reltuples::bigint FROM pg_class WHERE oid = "
                                         "'outbox.processed_events'::regclass"),
                 1, "the statistics count the one row left");
    helper_finished_claims(conn, "plan", LEDGER_ROWS);
    expect_reads_per_claim("statistics of one row over many pages");
}
