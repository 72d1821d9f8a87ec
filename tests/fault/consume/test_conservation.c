/* SPDX-License-Identifier: MIT */
/*
 * test_conservation.c - FAULTS.md T01 and T02, shortened for CI, with the
 * end-to-end checker (conservation.h).
 *
 * T01: four writers commit events while three relays publish them and two
 * consumer replicas run two handlers each; with no fault at all, nothing
 * is lost, nothing is phantom, nothing is twice in the stream or in a
 * handler's effects, and every row ends terminal. The p99 from the
 * writer's transaction to the PubAck (published_at - created_at, both
 * database time) is reported, not asserted: timing figures belong to
 * outbox-bench, and this build runs under ASan.
 *
 * T02: transactions that enqueue and then roll back (40 %), or fail on a
 * constraint after the enqueue (10 %: half on a later statement, half at
 * COMMIT through a deferred constraint), leave no outbox row and no message;
 * outbox rows equal committed business rows exactly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "chaos.h"
#include "conservation.h"
#include "consume_test.h"
#include "harness.h"
#include "relay_test.h"
#include "writer_thread.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { RELAYS = 3, REPLICAS = 2, WRITERS = 4 };

static PGconn *conn;

static void
setup(void)
{
    conn = chaos_begin(consume_test_prepare, 0);
}

static void
teardown(void)
{
    chaos_end(&conn);
}

TestSuite(conservation, .init = setup, .fini = teardown, .timeout = 240);

static const char *const handler_names[] = {"audit", "mailer", NULL};
static const char *const handlers[] = {CONSUME_EFFECT("audit"), CONSUME_EFFECT("mailer"), NULL};

static int
pipeline_settled(const struct consume_group *g)
{
    long long committed = harness_scalar_ll(conn, "SELECT count(*) FROM public.committed");

    return relay_test_unfinished(conn) == 0 && consume_test_handled(conn, "audit") == committed &&
           consume_test_handled(conn, "mailer") == committed &&
           consume_test_nats_drained(g->stream, g->consumer);
}

Test(conservation, t01_writers_relays_and_consumer_replicas_lose_and_repeat_nothing)
{
    enum { PER_WRITER = 4000 };
    struct harness_proc relays[RELAYS - 1], replicas[REPLICAS];
    struct writer_thread w[WRITERS];
    struct consume_group g;
    struct conservation c;
    long long started = harness_now_ms(), settle_started;
    char *p50, *p99, *max;

    /* The group brings the first relay; two more share its settings. */
    consume_group_init(&g, "jetstream", "T01", NULL);
    relay_env_set(&g.relay_env, "OUTBOX_BATCH_SIZE", "100");
    for (int i = 0; i < RELAYS - 1; i++) {
        char name[32];

        snprintf(name, sizeof(name), "relay-%d", i + 2);
        relay_test_start(&relays[i], &g.relay_env, name);
    }
    relay_env_set(&g.env, "OUTBOX_BATCH_SIZE", "50");
    for (int i = 0; i < REPLICAS; i++) {
        char name[32];

        snprintf(name, sizeof(name), "replica-%d", i + 1);
        consume_test_start(&replicas[i], &g.env, name, handlers);
    }
    /* About 1 000 events/s in all: 4 writers x 5 events every ~20 ms. */
    for (int i = 0; i < WRITERS; i++) {
        chaos_start_writer(&w[i], PER_WRITER, 5, 20);
    }
    for (int i = 0; i < WRITERS; i++) {
        HARNESS_WAIT_UNTIL(atomic_load(&w[i].done), 120000);
        writer_thread_join(&w[i]);
    }
    settle_started = harness_now_ms();
    HARNESS_WAIT_UNTIL(pipeline_settled(&g), 60000);
    cr_log_info("T01: %d events from %d writers in %lld ms; settled %lld ms after the writers",
                WRITERS * PER_WRITER, WRITERS, settle_started - started,
                harness_now_ms() - settle_started);
    p50 = harness_scalar_text(conn, "SELECT round(1000 * extract(epoch FROM percentile_cont(0.5) "
                                    "WITHIN GROUP (ORDER BY published_at - created_at)))::text "
                                    "FROM outbox.events");
    p99 = harness_scalar_text(conn, "SELECT round(1000 * extract(epoch FROM percentile_cont(0.99) "
                                    "WITHIN GROUP (ORDER BY published_at - created_at)))::text "
                                    "FROM outbox.events");
    max = harness_scalar_text(conn, "SELECT round(1000 * extract(epoch FROM max(published_at - "
                                    "created_at)))::text FROM outbox.events");
    cr_log_info("T01: transaction -> PubAck (database time) p50=%s ms p99=%s ms max=%s ms", p50,
                p99, max);
    free(p50);
    free(p99);
    free(max);
    for (int i = 0; i < REPLICAS; i++) {
        consume_test_assert_running(&replicas[i], "a consumer replica");
        consume_test_stop(&replicas[i], 10000);
    }
    for (int i = 0; i < RELAYS - 1; i++) {
        relay_test_assert_running(&relays[i], "a relay");
        relay_test_stop(&relays[i], 10000);
    }
    c = conservation_expect_zero(conn, g.stream, handler_names);
    cr_assert_eq(c.base.committed, (size_t)(WRITERS * PER_WRITER));
    cr_assert_eq(c.base.stream, c.base.committed);
    consume_test_expect_nothing_spent(conn);
    consume_group_fini(&g);
}

/* ---- T02 ------------------------------------------------------------------------------ */

enum txn_fate { COMMITS, ROLLS_BACK, FAILS_LATER, FAILS_AT_COMMIT };

/* 50 % commit, 40 % roll back after the enqueue, 5 % + 5 % fail on a constraint afterwards. */
static enum txn_fate
fate_of(int i)
{
    int r = i % 20;

    return r < 10 ? COMMITS : r < 18 ? ROLLS_BACK : r == 18 ? FAILS_LATER : FAILS_AT_COMMIT;
}

static PGresult *
exec_expect(PGconn *c, const char *sql, ExecStatusType want)
{
    PGresult *res = PQexec(c, sql);

    cr_assert_eq(PQresultStatus(res), want, "%s: %s", sql, PQerrorMessage(c));
    return res;
}

/* Runs one business transaction of `per_txn` events to its fate; 1 if it committed. */
static int
business_transaction(PGconn *c, enum txn_fate fate, int per_txn)
{
    char sql[384];
    PGresult *res;
    int committed;

    PQclear(exec_expect(c, "BEGIN", PGRES_COMMAND_OK));
    snprintf(sql, sizeof(sql),
             "INSERT INTO public.committed SELECT outbox.enqueue('movie', gen_random_uuid(), "
             "'review.logged', jsonb_build_object('n', g)) FROM generate_series(1, %d) AS g",
             per_txn);
    PQclear(exec_expect(c, sql, PGRES_COMMAND_OK));
    switch (fate) {
    case ROLLS_BACK:
        PQclear(exec_expect(c, "ROLLBACK", PGRES_COMMAND_OK));
        return 0;
    case FAILS_LATER: /* the business's next statement breaks a constraint */
        PQclear(exec_expect(c, "INSERT INTO public.guard_now VALUES (1)", PGRES_FATAL_ERROR));
        PQclear(exec_expect(c, "ROLLBACK", PGRES_COMMAND_OK));
        return 0;
    case FAILS_AT_COMMIT: /* a deferred constraint fails COMMIT itself */
        PQclear(exec_expect(c, "INSERT INTO public.guard_deferred VALUES (1)", PGRES_COMMAND_OK));
        break;
    case COMMITS:
        break;
    }
    res = PQexec(c, "COMMIT");
    committed = PQresultStatus(res) == PGRES_COMMAND_OK;
    cr_assert_eq(committed, fate == COMMITS, "COMMIT %s: %s", committed ? "succeeded" : "failed",
                 PQerrorMessage(c));
    if (!committed) {
        cr_assert_str_eq(PQresultErrorField(res, PG_DIAG_SQLSTATE), "23505");
    }
    PQclear(res);
    return committed;
}

Test(conservation, t02_rolled_back_and_failed_transactions_leave_no_row_and_no_message)
{
    enum { TXNS = 4000, PER_TXN = 2 };
    struct harness_proc relays[RELAYS];
    struct relay_env env;
    struct conservation c;
    PGconn *writer;
    long long committed = 0, fates[4] = {0};

    harness_exec(conn, "CREATE TABLE public.guard_now (k int PRIMARY KEY)");
    harness_exec(conn, "CREATE TABLE public.guard_deferred (k int, "
                       "UNIQUE (k) DEFERRABLE INITIALLY DEFERRED)");
    harness_exec(conn, "INSERT INTO public.guard_now VALUES (1)");
    harness_exec(conn, "INSERT INTO public.guard_deferred VALUES (1)");
    relay_test_env(&env, "T02", "t02");
    for (int i = 0; i < RELAYS; i++) {
        char name[32];

        snprintf(name, sizeof(name), "relay-%d", i + 1);
        relay_test_start(&relays[i], &env, name);
    }
    writer = PQconnectdb(harness_db_url());
    cr_assert_eq(PQstatus(writer), CONNECTION_OK, "%s", PQerrorMessage(writer));
    for (int i = 0; i < TXNS; i++) {
        enum txn_fate f = fate_of(i);

        fates[f]++;
        committed += business_transaction(writer, f, PER_TXN) * PER_TXN;
    }
    PQfinish(writer);
    cr_log_info("T02: %d transactions: %lld committed, %lld rolled back, %lld failed on a later "
                "statement, %lld failed at COMMIT",
                TXNS, fates[COMMITS], fates[ROLLS_BACK], fates[FAILS_LATER],
                fates[FAILS_AT_COMMIT]);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 60000);
    for (int i = 0; i < RELAYS; i++) {
        relay_test_assert_running(&relays[i], "a relay");
        relay_test_stop(&relays[i], 10000);
    }
    c = conservation_expect_zero(conn, "T02", NULL);
    cr_assert_eq(c.base.committed, (size_t)committed, "business rows %zu, committed %lld",
                 c.base.committed, committed);
    cr_assert_eq(c.outbox_rows, committed, "outbox rows %lld != committed business rows %lld",
                 c.outbox_rows, committed);
    cr_assert_eq(c.base.stream, (size_t)committed);
    relay_env_fini(&env);
}
