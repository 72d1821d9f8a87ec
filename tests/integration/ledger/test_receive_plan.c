/* SPDX-License-Identifier: MIT */
/*
 * test_receive_plan.c - outbox.receive() reads a bounded part of the outbox
 * in the states a busy outbox table reaches, as the relay does: it runs the
 * relay's statements (migration 0020's functions), whose plans the relay
 * pins for its own session (sql/queries/store_session.sql, FACTS 14) and
 * the functions pin for the call (migration 0029). Unpinned, over a backlog
 * of 100,000 rows without statistics, a receive() of 100 events read
 * 98,601 rows of events (a bitmap scan of every entry and a sort), where
 * the ordered scan of the window index stops after the batch.
 *
 * Counted with the server's counters of the call's transaction
 * (pg_stat_xact_user_tables): rows read by scans of events and rows
 * fetched through its indexes, around one receive() of BATCH events.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>

#include "harness.h"
#include "ledger_helpers.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum {
    BACKLOG = 100000, /* rows waiting, written faster than statistics follow */
    BATCH = 100,      /* events one receive() takes */
    READS = 10,       /* rows a receive() may read per event it takes */
};

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    harness_exec(conn, "ALTER TABLE outbox.events SET (autovacuum_enabled = off)");
    harness_exec(conn, "SELECT outbox.enqueue('movie', gen_random_uuid()::text, "
                       "'review.logged', '{\"stars\": 5}'::jsonb)");
    harness_exec(conn, "CREATE TEMP TABLE template AS SELECT * FROM outbox.events");
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(receive_plan, .init = setup, .fini = teardown, .timeout = 120);

/* `n` more waiting copies of the template row, new ids in write order, rules off while loading. */
static void
load(long long n)
{
    char sql[1024];

    harness_exec(conn, "ALTER TABLE outbox.events DISABLE TRIGGER USER");
    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, "
             "envelope) SELECT g.id, t.aggregate_type, t.aggregate_id, t.event_type, "
             "jsonb_set(t.envelope, '{id}', to_jsonb(g.id::text)) FROM template AS t, "
             "(SELECT outbox.uuid_v7(clock_timestamp()) AS id FROM generate_series(1, %lld)) "
             "AS g",
             n);
    harness_exec(conn, sql);
    harness_exec(conn, "ALTER TABLE outbox.events ENABLE ALWAYS TRIGGER events_row_valid");
    harness_exec(conn, "ALTER TABLE outbox.events ENABLE TRIGGER events_wakeup");
}

/* Three receive() calls, each of a whole batch, each reading at most READS rows an event. */
static void
expect_bounded_reads(const char *state)
{
    char sql[128];

    snprintf(sql, sizeof(sql), "SELECT count(*) FROM outbox.receive('plan', %d, 30)", BATCH);
    for (int i = 1; i <= 3; i++) {
        long long scanned, fetched, got;

        harness_exec(conn, "BEGIN");
        scanned = helper_xact_counter(conn, "events", "seq_tup_read");
        fetched = helper_xact_counter(conn, "events", "idx_tup_fetch");
        got = harness_scalar_ll(conn, sql);
        scanned = helper_xact_counter(conn, "events", "seq_tup_read") - scanned;
        fetched = helper_xact_counter(conn, "events", "idx_tup_fetch") - fetched;
        harness_exec(conn, "COMMIT");
        cr_log_info("%s, receive %d: %lld events, %lld rows scanned, %lld fetched by index", state,
                    i, got, scanned, fetched);
        cr_assert_eq(got, BATCH, "%s, receive %d: %lld events, not %d", state, i, got, BATCH);
        cr_assert_leq(scanned + fetched, (long long)READS * BATCH,
                      "%s, receive %d: %d events read %lld rows of events (%lld by scans, %lld "
                      "through an index); %d wait",
                      state, i, BATCH, scanned + fetched, scanned, fetched, BACKLOG);
    }
}

Test(receive_plan, no_statistics_yet)
{
    load(BACKLOG);
    expect_bounded_reads("no statistics");
}

Test(receive_plan, statistics_from_before_a_bulk_load)
{
    load(BATCH);
    harness_exec(conn, "ANALYZE outbox.events");
    load(BACKLOG);
    expect_bounded_reads("statistics from before a bulk load");
}

Test(receive_plan, fresh_statistics_of_a_long_backlog)
{
    load(BACKLOG);
    harness_exec(conn, "ANALYZE outbox.events");
    expect_bounded_reads("fresh statistics");
}
