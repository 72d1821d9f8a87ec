/* SPDX-License-Identifier: MIT */
/*
 * test_consume_tx_handler.c - transactional handlers registered through the
 * library (outbox_consumer_add_tx_handler), consumer in this process on
 * the DB backend: what a handler writes through its connection commits
 * with the done mark, once per event; and a handler that reports done
 * after one of its statements failed is failed and dead-lettered like any
 * failure, without holding back the rest of its batch.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>
#include <libpq-fe.h>

#include "consume_test.h"
#include "harness.h"
#include "outbox/worker.h"
#include "relay_test.h"
#include "test_config.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    consume_test_prepare(conn);
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(consume_tx_handler, .init = setup, .fini = teardown, .timeout = 120);

/* Records its effect through the ledger's connection, inside the ledger's transaction. */
static outbox_handler_result
record_effect(void *ctx, PGconn *c, const outbox_delivery *d, outbox_error *err)
{
    const char *params[] = {outbox_delivery_event_id(d), ctx};
    PGresult *res = PQexecParams(c,
                                 "INSERT INTO public.effects (event_id, handler) "
                                 "VALUES ($1::uuid, $2)",
                                 2, NULL, params, NULL, NULL, 0);
    int ok = PQresultStatus(res) == PGRES_COMMAND_OK;

    if (!ok) {
        snprintf(err->message, sizeof(err->message), "%s", PQerrorMessage(c));
    }
    PQclear(res);
    return ok ? OUTBOX_HANDLER_DONE : OUTBOX_HANDLER_FAIL;
}

/* For events whose payload n is odd, runs a failing statement and says done anyway. */
static outbox_handler_result
careless(void *ctx, PGconn *c, const outbox_delivery *d, outbox_error *err)
{
    const char *params[] = {outbox_delivery_envelope(d, NULL)};
    PGresult *res = PQexecParams(c,
                                 "SELECT CASE WHEN ($1::jsonb->'payload'->>'n')::int % 2 = 1 "
                                 "THEN 1 / 0 ELSE 1 END",
                                 1, NULL, params, NULL, NULL, 0);

    PQclear(res);
    if (PQtransactionStatus(c) == PQTRANS_INTRANS) {
        return record_effect(ctx, c, d, err);
    }
    return OUTBOX_HANDLER_DONE; /* the bug under test: the error is ignored */
}

struct running {
    outbox_consumer *c;
    pthread_t thread;
    outbox_status status;
};

static void *
run(void *arg)
{
    struct running *r = arg;
    outbox_error err = {0};

    r->status = outbox_consumer_run(r->c, &err);
    return NULL;
}

/* A DB-backend consumer with short retries, as the tests below run it. */
static outbox_config *
db_consumer_config(int max_attempts)
{
    char attempts[16];

    snprintf(attempts, sizeof(attempts), "%d", max_attempts);
    return test_config(OUTBOX_CONFIG_CONSUMER,
                       (const char *const[]){"database_url", harness_db_url(), "bus", "db",
                                             "max_attempts", attempts, "backoff_base_ms", "100",
                                             "batch_size", "10", NULL});
}

static void
start(struct running *r, const char *name, outbox_tx_handler_fn fn)
{
    outbox_config *cfg = db_consumer_config(2);
    outbox_error err = {0};

    cr_assert_eq(outbox_consumer_new(cfg, &r->c, &err), OUTBOX_OK, "%s", err.message);
    outbox_config_free(cfg);
    cr_assert_eq(outbox_consumer_add_tx_handler(r->c, name, NULL, fn, (void *)name, &err),
                 OUTBOX_OK, "%s", err.message);
    cr_assert_eq(pthread_create(&r->thread, NULL, run, r), 0);
}

static void
stop(struct running *r)
{
    outbox_consumer_stop(r->c);
    pthread_join(r->thread, NULL);
    cr_assert_eq(r->status, OUTBOX_OK, "the consumer ended with %s", outbox_status_name(r->status));
    outbox_consumer_free(r->c);
}

Test(consume_tx_handler, a_tx_handlers_writes_commit_with_the_done_mark_once_per_event)
{
    struct running r;

    relay_test_enqueue(conn, 40);
    start(&r, "recorder", record_effect);
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "recorder") == 40, 30000);
    stop(&r);
    consume_test_expect_exactly_once(conn, "recorder");
    consume_test_expect_nothing_spent(conn);
}

Test(consume_tx_handler, done_after_a_failed_statement_is_a_failure_and_blocks_no_other_event)
{
    enum { EVENTS = 20 };
    struct running r;

    relay_test_enqueue(conn, EVENTS); /* payload n = 1..20: ten odd, ten even */
    start(&r, "careless", careless);
    HARNESS_WAIT_UNTIL(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters") ==
                               EVENTS / 2 &&
                           consume_test_handled(conn, "careless") == EVENTS / 2,
                       30000);
    stop(&r);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.processed_events "
                                         "WHERE handler = 'careless' AND dead_at IS NOT NULL "
                                         "AND attempts = 2 AND last_error LIKE "
                                         "'%done after a statement in its transaction failed%'"),
                 EVENTS / 2, "each odd event must be dead after max attempts, with the reason");
    cr_assert_eq(consume_test_effect_dups(conn, "careless"), 0);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM public.effects e JOIN "
                                         "outbox.events o ON o.id = e.event_id WHERE "
                                         "(o.envelope->'payload'->>'n')::int % 2 = 0"),
                 EVENTS / 2, "every even event's effect committed once");
}

/* Events the ledger holds as handled by `handler`. */
static long long
ledger_done(const char *handler)
{
    return consume_test_ll(conn,
                           "SELECT count(*) FROM outbox.processed_events "
                           "WHERE handler = $1 AND status = 'done'",
                           handler);
}

static void
start_sql(struct running *r, const char *name, const char *statement, int max_attempts)
{
    outbox_config *cfg = db_consumer_config(max_attempts);
    outbox_error err = {0};

    cr_assert_eq(outbox_consumer_new(cfg, &r->c, &err), OUTBOX_OK, "%s", err.message);
    outbox_config_free(cfg);
    cr_assert_eq(outbox_consumer_add_sql_handler(r->c, name, NULL, statement, &err), OUTBOX_OK,
                 "%s", err.message);
    cr_assert_eq(pthread_create(&r->thread, NULL, run, r), 0);
}

/*
 * SQL handler statements are prepared once per connection. A prepare that
 * fails (here: its table does not exist yet) is each event's failure, with
 * the server's reason, and is tried again on the next delivery: once the
 * table exists every event is handled, exactly once.
 */
Test(consume_tx_handler, a_sql_handler_that_cannot_be_prepared_fails_until_it_can)
{
    enum { EVENTS = 20 };
    struct running r;

    relay_test_enqueue(conn, EVENTS);
    start_sql(&r, "late", "INSERT INTO public.late_effects (event_id) VALUES (($1->>'id')::uuid)",
              1000);
    HARNESS_WAIT_UNTIL(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.processed_events "
                                               "WHERE handler = 'late' AND attempts >= 1 AND "
                                               "last_error LIKE '%late_effects%does not exist%'") ==
                           EVENTS,
                       30000);
    harness_exec(conn, "CREATE TABLE public.late_effects (event_id uuid NOT NULL)");
    HARNESS_WAIT_UNTIL(ledger_done("late") == EVENTS, 30000);
    stop(&r);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) - count(DISTINCT event_id) "
                                         "FROM public.late_effects"),
                 0);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM public.late_effects"), EVENTS);
}

/*
 * A session that forgets its prepared statements (a pooler's DISCARD ALL
 * does this; here the handler's own statement deallocates them) costs
 * the events nothing: "prepared statement does not exist" is not the
 * handler's failure, and the statement is prepared again.
 */
Test(consume_tx_handler, a_forgotten_prepared_statement_is_prepared_again_at_no_cost)
{
    enum { EVENTS = 20 };
    struct running r;

    relay_test_enqueue(conn, EVENTS);
    start_sql(&r, "forgetful", "DEALLOCATE ALL", 2);
    HARNESS_WAIT_UNTIL(ledger_done("forgetful") == EVENTS, 30000);
    stop(&r);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.processed_events "
                                         "WHERE handler = 'forgetful' AND attempts > 0"),
                 0, "a forgotten statement spent attempts");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters"), 0);
}
