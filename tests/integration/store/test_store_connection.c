/* SPDX-License-Identifier: MIT */
/*
 * test_store_connection.c - a store's connection: defaults that notice a
 * dead server within seconds unless the conninfo says otherwise, session
 * timeouts, no password in any message, OUTBOX_EUNAVAILABLE while the
 * server is down, and a reconnect that works once it is back. Its prepared
 * statements: one the server forgot (a pooler's DISCARD ALL) and one whose
 * cached plan went stale (a column's type changed) are prepared again and
 * the call succeeds the first time.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "store/store.h"
#include "store/store_int.h"
#include "store_helpers.h"

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

TestSuite(store_connection, .init = setup, .fini = teardown, .timeout = 60);

/* The value libpq used for `keyword` on the store's connection; "" if unset. */
static const char *
effective_option(struct obx_store *store, const char *keyword, char *out, size_t cap)
{
    PQconninfoOption *opts = PQconninfo(store->pg.conn);

    out[0] = '\0';
    for (PQconninfoOption *o = opts; o != NULL && o->keyword != NULL; o++) {
        if (strcmp(o->keyword, keyword) == 0 && o->val != NULL) {
            snprintf(out, cap, "%s", o->val);
        }
    }
    PQconninfoFree(opts);
    return out;
}

static char *
show(struct obx_store *store, const char *setting)
{
    char sql[128];
    PGresult *res;
    char *value;

    snprintf(sql, sizeof(sql), "SHOW %s", setting);
    res = PQexec(store->pg.conn, sql);
    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQerrorMessage(store->pg.conn));
    value = strdup(PQgetvalue(res, 0, 0));
    PQclear(res);
    return value;
}

Test(store_connection, adds_dead_server_detection_and_session_timeouts_by_default)
{
    struct obx_store *store = helper_store_open("store-conn-test");
    const char *expected[][2] = {{"connect_timeout", "5"},  {"keepalives", "1"},
                                 {"keepalives_idle", "10"}, {"keepalives_interval", "5"},
                                 {"keepalives_count", "3"}, {"tcp_user_timeout", "25000"}};
    char value[64];
    char *timeout, *idle;

    for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++) {
        cr_assert_str_eq(effective_option(store, expected[i][0], value, sizeof(value)),
                         expected[i][1], "%s", expected[i][0]);
    }
    timeout = show(store, "statement_timeout");
    idle = show(store, "idle_in_transaction_session_timeout");
    cr_assert_str_eq(timeout, "30s");
    cr_assert_str_eq(idle, "1min");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM pg_stat_activity "
                                         "WHERE application_name = 'store-conn-test'"),
                 1, "the application name is shown to operators");
    free(timeout);
    free(idle);
    obx_store_close(store);
}

Test(store_connection, keeps_what_the_conninfo_sets)
{
    char conninfo[1024];
    struct obx_store_options opts = {conninfo, "outbox", "store-conn-test", NULL};
    struct obx_store *store = NULL;
    outbox_error err;
    char value[64];
    char *timeout;

    snprintf(conninfo, sizeof(conninfo),
             "%s%ckeepalives_idle=42&application_name=from-url"
             "&options=-c%%20statement_timeout%%3D7s",
             harness_db_url(), strchr(harness_db_url(), '?') ? '&' : '?');
    cr_assert_eq(obx_store_open(&opts, &store, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_str_eq(effective_option(store, "keepalives_idle", value, sizeof(value)), "42");
    cr_assert_str_eq(effective_option(store, "keepalives_count", value, sizeof(value)), "3",
                     "defaults still fill what the conninfo leaves out");
    cr_assert_str_eq(effective_option(store, "application_name", value, sizeof(value)), "from-url");
    timeout = show(store, "statement_timeout");
    cr_assert_str_eq(timeout, "7s", "a timeout set elsewhere is kept");
    free(timeout);
    obx_store_close(store);
}

Test(store_connection, never_shows_the_conninfo_or_its_password_in_a_message)
{
    const char *bad[] = {
        "host=127.0.0.1 password=hunter2-secret bogus_option=1",
        "postgresql://u:hunter2-secret@127.0.0.1:1/db?bogus_option=1",
        "host=127.0.0.1 port=1 password=hunter2-secret connect_timeout=2",
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct obx_store_options opts = {bad[i], "outbox", "store-conn-test", NULL};
        struct obx_store *store = NULL;
        outbox_error err;
        outbox_status status = obx_store_open(&opts, &store, &err);

        cr_assert_neq(status, OUTBOX_OK, "case %zu", i);
        cr_assert_null(store);
        cr_assert(strstr(err.message, "hunter2") == NULL, "case %zu leaks: %s", i, err.message);
        cr_assert(strchr(err.message, '\n') == NULL, "one line: %s", err.message);
    }
}

/* Leases up to 10 rows; fails the test with the store's message unless the call succeeds. */
static size_t
lease_ok(struct obx_store *store, const char *when)
{
    struct obx_lease lease;
    outbox_error err = {0};
    size_t n;

    cr_assert_eq(obx_store_lease(store, 10, 30, 5, &lease, &err), OUTBOX_OK, "lease %s: %s", when,
                 err.message);
    n = lease.count;
    obx_lease_fini(&lease);
    return n;
}

Test(store_connection, a_prepared_statement_the_server_forgot_is_prepared_again)
{
    struct obx_store *store = helper_store_open("store-forgot");

    helper_enqueue(conn, 2);
    cr_assert_eq(lease_ok(store, "first"), 2);
    /* What a pooler does between two clients of one server connection. */
    harness_exec(store->pg.conn, "DISCARD ALL");
    helper_enqueue(conn, 3);
    cr_assert_eq(lease_ok(store, "after DISCARD ALL"), 3);
    cr_assert_eq(harness_scalar_ll(store->pg.conn, "SELECT count(*) FROM pg_prepared_statements "
                                                   "WHERE statement LIKE '-- claim_window:%'"),
                 1, "the claim is prepared again, once");
    obx_store_close(store);
}

Test(store_connection, a_prepared_statement_whose_plan_went_stale_is_prepared_again)
{
    struct obx_store *store = helper_store_open("store-stale");

    helper_enqueue(conn, 2);
    cr_assert_eq(lease_ok(store, "first"), 2);
    /* The lease returns `attempts`: a new type changes its result, so the cached plan
     * cannot be used (0A000) while the statement of that name still exists (42P05). */
    harness_exec(conn, "ALTER TABLE outbox.events ALTER COLUMN attempts TYPE bigint");
    helper_enqueue(conn, 3);
    cr_assert_eq(lease_ok(store, "after the column changed"), 3);
    cr_assert_eq(lease_ok(store, "once more"), 0);
    obx_store_close(store);
}

Test(store_connection, an_unreachable_server_is_unavailable_not_an_error_in_the_input)
{
    struct obx_store_options opts = {"host=127.0.0.1 port=1 connect_timeout=2", "outbox", NULL,
                                     NULL};
    struct obx_store_options bad_schema = {harness_db_url(), "Robert'); DROP", NULL, NULL};
    struct obx_store *store = NULL;
    outbox_error err;

    cr_assert_eq(obx_store_open(&opts, &store, &err), OUTBOX_EUNAVAILABLE, "%s", err.message);
    cr_assert_null(store);
    cr_assert_eq(obx_store_open(&bad_schema, &store, &err), OUTBOX_EINVAL);
    cr_assert_null(store);
}

/* Takes the servers before connecting: this suite stops PostgreSQL. */
static void
setup_exclusive(void)
{
    harness_servers_exclusive();
    conn = harness_pg_connect_fresh();
}

TestSuite(store_outage, .init = setup_exclusive, .fini = teardown, .timeout = 120);

static void
expect_unavailable_while_down(struct obx_store *store)
{
    struct obx_finish_options opts = helper_finish_options(OBX_FINISH_MARK, 5);
    struct obx_finish_counts counts;
    struct obx_lease lease = {0};
    size_t deleted;
    int woken = 0;
    outbox_error err;

    cr_assert_eq(obx_store_lease(store, 10, 60, 5, &lease, &err), OUTBOX_EUNAVAILABLE, "%s",
                 err.message);
    cr_assert_eq(obx_store_wait(store, 100, &woken, &err), OUTBOX_EUNAVAILABLE, "%s", err.message);
    cr_assert_eq(obx_store_prune_done(store, 0, 10, NULL, &deleted, &err), OUTBOX_EUNAVAILABLE);
    lease.count = 0;
    cr_assert_eq(obx_store_finish(store, &lease, NULL, NULL, &opts, &counts, &err), OUTBOX_OK,
                 "an empty finish needs no server");
    cr_assert_eq(obx_store_reconnect(store, &err), OUTBOX_EUNAVAILABLE, "%s", err.message);
    cr_assert_eq(obx_store_lease(store, 10, 60, 5, &lease, &err), OUTBOX_EUNAVAILABLE,
                 "a failed reconnect leaves the store unavailable, not broken");
}

static void
outage(const char *mode)
{
    struct obx_store *store = helper_store_open("store-outage");
    struct obx_lease lease;
    outbox_error err;
    PGconn *writer;
    int woken = 0;

    cr_assert_eq(obx_store_listen(store, &err), OUTBOX_OK, "%s", err.message);
    helper_enqueue(conn, 2);
    PQfinish(conn);
    conn = NULL;
    harness_pg_stop(mode);
    expect_unavailable_while_down(store);
    harness_pg_start();
    cr_assert_eq(obx_store_reconnect(store, &err), OUTBOX_OK, "%s", err.message);
    helper_lease(store, 10, 60, &lease);
    cr_assert_eq(lease.count, 2, "committed rows survive, the store works again");
    obx_lease_fini(&lease);
    /* LISTEN is repeated by the reconnect. */
    writer = helper_connect();
    cr_assert_eq(obx_store_wait(store, 0, &woken, &err), OUTBOX_OK, "%s", err.message);
    helper_enqueue(writer, 1);
    cr_assert_eq(obx_store_wait(store, 5000, &woken, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_eq(woken, 1, "the reconnected store still hears wake-ups");
    PQfinish(writer);
    obx_store_close(store);
}

Test(store_outage, calls_are_unavailable_while_the_server_is_stopped_and_reconnect_works_after)
{
    outage("fast");
}

Test(store_outage, a_crashed_server_is_unavailable_too)
{
    outage("immediate");
}
