/* SPDX-License-Identifier: MIT */
/*
 * test_aggregate_seq.c - with ordering on (migration 0014), every writer's
 * event gets its aggregate's next aggregate_seq, 1..n with no gap, in the
 * order the transactions commit: the C writer (one and a batch),
 * outbox.enqueue(), outbox.enqueue_many() and a plain INSERT. A rollback
 * leaves no gap, off then on reuses no number, the nil aggregate id stays
 * unordered, a number a writer makes up is refused, and a role that may
 * only insert events gets its numbers without any right on the counters.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "outbox/outbox.h"

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh_ordered();
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(aggregate_seq, .init = setup, .fini = teardown, .timeout = 90);

static const char agg[] = "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b";
static const char nil[] = "00000000-0000-0000-0000-000000000000";

/* One event of aggregate `id` through the C writer, in `c`'s open transaction. */
static void
enqueue_c(PGconn *c, const char *id, const char *type)
{
    outbox_event *ev = outbox_event_new();
    outbox_error err = {0};

    cr_assert_eq(outbox_event_set_route(ev, "order", type, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_eq(outbox_event_set_aggregate_id(ev, id, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_eq(outbox_event_set_payload_json(ev, "{}", 2, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_eq(outbox_enqueue(c, ev, &err), OUTBOX_OK, "%s", err.message);
    outbox_event_free(ev);
}

/* One event through outbox.enqueue(); returns its aggregate_seq (0: none). */
static long long
enqueue_sql(PGconn *c, const char *id, const char *type)
{
    char sql[512];
    char *event_id;

    snprintf(sql, sizeof(sql), "SELECT outbox.enqueue('order', '%s', '%s', '{}')", id, type);
    event_id = harness_scalar_text(c, sql);
    /* Read in a statement of its own: the writer's row is not in its own statement's snapshot. */
    snprintf(sql, sizeof(sql),
             "SELECT coalesce(aggregate_seq, 0) FROM outbox.events WHERE id = '%s'", event_id);
    free(event_id);
    return harness_scalar_ll(c, sql);
}

/* A hand-written row of aggregate `id`, as a foreign writer would insert it. */
static void
insert_plain(PGconn *c, const char *id, const char *type)
{
    char sql[1024];

    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, envelope)"
             " SELECT u, 'order', '%s', '%s', jsonb_build_object('id', u::text, 'event_type',"
             " '%s', 'aggregate_type', 'order', 'aggregate_id', '%s', 'occurred_at',"
             " '2026-11-29T09:41:56.123Z', 'schema_version', 1, 'payload', '{}'::jsonb)"
             " FROM (SELECT gen_random_uuid() AS u) AS g",
             id, type, type, id);
    harness_exec(c, sql);
}

/* The aggregate's numbers "1,2,3" in number order, checked equal in row and envelope. */
static char *
numbers_of(const char *id)
{
    char sql[512];

    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM outbox.events WHERE aggregate_id = '%s'"
             " AND (envelope ->> 'aggregate_seq') IS DISTINCT FROM aggregate_seq::text",
             id);
    cr_expect_eq(harness_scalar_ll(conn, sql), 0, "row and envelope disagree for %s", id);
    snprintf(sql, sizeof(sql),
             "SELECT coalesce(string_agg(coalesce(aggregate_seq::text, '-'), ','"
             " ORDER BY aggregate_seq NULLS LAST, id), '')"
             " FROM outbox.events WHERE aggregate_id = '%s'",
             id);
    return harness_scalar_text(conn, sql);
}

static void
expect_numbers(const char *id, const char *want)
{
    char *got = numbers_of(id);

    cr_expect_str_eq(got, want, "aggregate %s", id);
    free(got);
}

Test(aggregate_seq, every_writer_numbers_an_aggregate_1_to_n_without_gap)
{
    outbox_event *batch[3];
    outbox_error err = {0};

    harness_exec(conn, "BEGIN");
    enqueue_c(conn, agg, "created");
    for (int i = 0; i < 3; i++) {
        batch[i] = outbox_event_new();
        outbox_event_set_route(batch[i], "order", i == 1 ? "noted" : "line.added", NULL);
        outbox_event_set_aggregate_id(batch[i], i == 1 ? nil : agg, NULL);
        outbox_event_set_payload_json(batch[i], "{}", 2, NULL);
    }
    cr_assert_eq(outbox_enqueue_batch(conn, batch, 3, &err), OUTBOX_OK, "%s", err.message);
    harness_exec(conn, "COMMIT");
    cr_expect_eq(enqueue_sql(conn, agg, "paid"), 4);
    insert_plain(conn, agg, "packed");
    /* One statement of three events of the aggregate: numbered in the array's order. */
    harness_exec(
        conn,
        "SELECT outbox.enqueue_many(jsonb_build_array("
        "jsonb_build_object('aggregate_type', 'order', 'aggregate_id', "
        "'0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', 'event_type', 'a', 'payload', '{}'::jsonb),"
        "jsonb_build_object('aggregate_type', 'order', 'aggregate_id', "
        "'00000000-0000-0000-0000-000000000000', 'event_type', 'b', 'payload', '{}'::jsonb),"
        "jsonb_build_object('aggregate_type', 'order', 'aggregate_id', "
        "'0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', 'event_type', 'c', 'payload', '{}'::jsonb),"
        "jsonb_build_object('aggregate_type', 'order', 'aggregate_id', "
        "'0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', 'event_type', 'd', 'payload', '{}'::jsonb)))");
    expect_numbers(agg, "1,2,3,4,5,6,7,8");
    cr_expect_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.events WHERE event_type"
                                         " = 'a' AND aggregate_seq = 6 OR event_type = 'c' AND"
                                         " aggregate_seq = 7 OR event_type = 'd' AND"
                                         " aggregate_seq = 8"),
                 3, "enqueue_many numbers in the array's order");
    /* No aggregate: no number, and no counter either. */
    expect_numbers(nil, "-,-");
    cr_expect_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.aggregate_heads"), 1);
    for (int i = 0; i < 3; i++) {
        outbox_event_free(batch[i]);
    }
}

Test(aggregate_seq, aggregates_are_numbered_apart)
{
    static const char other[] = "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a60";

    cr_expect_eq(enqueue_sql(conn, agg, "created"), 1);
    cr_expect_eq(enqueue_sql(conn, other, "created"), 1);
    cr_expect_eq(enqueue_sql(conn, agg, "paid"), 2);
    /* The same id under another aggregate type is another aggregate. */
    harness_exec(conn, "SELECT outbox.enqueue('invoice', '0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b',"
                       " 'created', '{}')");
    cr_expect_eq(harness_scalar_ll(conn, "SELECT aggregate_seq FROM outbox.events"
                                         " WHERE aggregate_type = 'invoice'"),
                 1);
}

/* Waits until the other session `pid` waits for a lock. */
static int
waiting_for_lock(void *arg)
{
    char sql[256];

    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM pg_stat_activity WHERE pid = %d AND wait_event_type = 'Lock'",
             *(int *)arg);
    return harness_scalar_ll(conn, sql) == 1;
}

Test(aggregate_seq, overlapping_transactions_are_numbered_in_commit_order)
{
    PGconn *first = PQconnectdb(harness_db_url());
    PGconn *second = PQconnectdb(harness_db_url());
    int pid;
    PGresult *res;

    cr_assert_eq(PQstatus(first), CONNECTION_OK);
    cr_assert_eq(PQstatus(second), CONNECTION_OK);
    /* `first` starts first (it has a transaction id and a snapshot); `second` starts
     * later, writes and commits first: it gets 1, `first` then 2. */
    harness_exec(first, "BEGIN");
    harness_exec(first, "SELECT pg_current_xact_id()");
    harness_exec(second, "BEGIN");
    enqueue_c(second, agg, "created");
    harness_exec(second, "COMMIT");
    enqueue_c(first, agg, "paid");
    harness_exec(first, "COMMIT");
    cr_expect_eq(harness_scalar_ll(conn, "SELECT aggregate_seq FROM outbox.events"
                                         " WHERE event_type = 'created'"),
                 1);
    cr_expect_eq(harness_scalar_ll(conn, "SELECT aggregate_seq FROM outbox.events"
                                         " WHERE event_type = 'paid'"),
                 2);

    /* While `first` holds the aggregate's counter (its event written, not committed),
     * `second`'s event waits for it, and gets the next number once `first` commits,
     * although `second` wrote while `first` was still open. */
    harness_exec(first, "BEGIN");
    enqueue_c(first, agg, "packed");
    pid = PQbackendPID(second);
    cr_assert(PQsendQuery(second, "BEGIN; SELECT outbox.enqueue('order', "
                                  "'0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', 'shipped', '{}');"
                                  " COMMIT"));
    cr_assert(harness_wait_until(waiting_for_lock, &pid, 10000),
              "the second writer did not wait for the first");
    harness_exec(first, "SELECT pg_sleep(0.2)");
    harness_exec(first, "COMMIT");
    while ((res = PQgetResult(second)) != NULL) {
        cr_expect(PQresultStatus(res) == PGRES_COMMAND_OK || PQresultStatus(res) == PGRES_TUPLES_OK,
                  "%s", PQresultErrorMessage(res));
        PQclear(res);
    }
    cr_expect_eq(harness_scalar_ll(conn, "SELECT aggregate_seq FROM outbox.events"
                                         " WHERE event_type = 'packed'"),
                 3);
    cr_expect_eq(harness_scalar_ll(conn, "SELECT aggregate_seq FROM outbox.events"
                                         " WHERE event_type = 'shipped'"),
                 4);
    expect_numbers(agg, "1,2,3,4");
    PQfinish(first);
    PQfinish(second);
}

Test(aggregate_seq, a_rolled_back_transaction_leaves_no_gap)
{
    cr_expect_eq(enqueue_sql(conn, agg, "created"), 1);
    harness_exec(conn, "BEGIN");
    cr_expect_eq(enqueue_sql(conn, agg, "paid"), 2);
    enqueue_c(conn, agg, "paid");
    harness_exec(conn, "ROLLBACK");
    /* And a savepoint rolled back inside a committed transaction. */
    harness_exec(conn, "BEGIN");
    harness_exec(conn, "SAVEPOINT s");
    insert_plain(conn, agg, "noted");
    harness_exec(conn, "ROLLBACK TO SAVEPOINT s");
    cr_expect_eq(enqueue_sql(conn, agg, "paid"), 2);
    harness_exec(conn, "COMMIT");
    expect_numbers(agg, "1,2");
}

Test(aggregate_seq, off_then_on_never_gives_a_number_twice)
{
    cr_expect_eq(enqueue_sql(conn, agg, "created"), 1);
    cr_expect_eq(enqueue_sql(conn, agg, "paid"), 2);
    cr_expect_eq(harness_scalar_ll(conn, "SELECT outbox.set_ordering(false)::int"), 1);
    cr_expect_eq(harness_scalar_ll(conn, "SELECT outbox.ordering_on()::int"), 0);
    /* Off: no number, in the row or the envelope. */
    cr_expect_eq(enqueue_sql(conn, agg, "noted"), 0);
    insert_plain(conn, agg, "noted");
    cr_expect_eq(harness_scalar_ll(conn, "SELECT outbox.set_ordering(true)::int"), 0);
    cr_expect_eq(enqueue_sql(conn, agg, "shipped"), 3);
    expect_numbers(agg, "1,2,3,-,-");
    /* Numbered rows kept their numbers through it all. */
    cr_expect_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.events"
                                         " WHERE envelope ? 'aggregate_seq'"),
                 3);
}

/* Runs `sql` and expects it to fail with `sqlstate`; returns the message (malloc'd). */
static char *
expect_failure(const char *sql, const char *sqlstate)
{
    PGresult *res = PQexec(conn, sql);
    char *message = strdup(PQresultErrorMessage(res));
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

    cr_expect_eq(PQresultStatus(res), PGRES_FATAL_ERROR, "%s succeeded", sql);
    cr_expect_str_eq(state != NULL ? state : "", sqlstate, "%s", message);
    PQclear(res);
    return message;
}

Test(aggregate_seq, a_number_never_given_is_refused_and_one_given_is_kept)
{
    static const char row[] =
        "INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, envelope,"
        " aggregate_seq) SELECT u, 'order', '0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', 'copied',"
        " jsonb_build_object('id', u::text, 'event_type', 'copied', 'aggregate_type', 'order',"
        " 'aggregate_id', '0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', 'occurred_at',"
        " '2026-11-29T09:41:56.123Z', 'schema_version', 1, 'payload', '{}'::jsonb,"
        " 'aggregate_seq', %s), %s FROM (SELECT gen_random_uuid() AS u) AS g";
    char sql[1024];
    char *message;

    cr_expect_eq(enqueue_sql(conn, agg, "created"), 1);
    cr_expect_eq(enqueue_sql(conn, agg, "paid"), 2);
    snprintf(sql, sizeof(sql), row, "5", "5");
    message = expect_failure(sql, "23514");
    cr_expect(strstr(message, "events_aggregate_seq_given") != NULL, "%s", message);
    cr_expect(strstr(message, "2 given, the row has 5") != NULL, "%s", message);
    free(message);
    /* Envelope and row must agree. */
    snprintf(sql, sizeof(sql), row, "2", "1");
    message = expect_failure(sql, "23514");
    cr_expect(strstr(message, "events_envelope_matches_row") != NULL, "%s", message);
    free(message);
    snprintf(sql, sizeof(sql), row, "0", "0");
    message = expect_failure(sql, "23514");
    cr_expect(strstr(message, "events_aggregate_seq_positive") != NULL, "%s", message);
    free(message);
    /* A number the aggregate has had (a dead letter written back) is kept. */
    snprintf(sql, sizeof(sql), row, "2", "2");
    harness_exec(conn, sql);
    expect_numbers(agg, "1,2,2");
    cr_expect_eq(enqueue_sql(conn, agg, "shipped"), 3);
}

Test(aggregate_seq, a_role_that_may_only_insert_events_gets_numbers)
{
    char role[96], sql[512];
    char *quoted, *message;

    /* Roles are cluster-wide: name it after this test's database. */
    snprintf(role, sizeof(role), "w_%s", PQdb(conn));
    quoted = PQescapeIdentifier(conn, role, strlen(role));
    snprintf(sql, sizeof(sql),
             "CREATE ROLE %s NOLOGIN; GRANT USAGE ON SCHEMA outbox TO %s; "
             "GRANT INSERT ON outbox.events TO %s; SET ROLE %s",
             quoted, quoted, quoted, quoted);
    harness_exec(conn, sql);
    harness_exec(conn, "SELECT outbox.enqueue('order', '0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b',"
                       " 'created', '{}')");
    harness_exec(conn, "BEGIN");
    enqueue_c(conn, agg, "paid");
    harness_exec(conn, "COMMIT");
    insert_plain(conn, agg, "packed");
    /* It has no right on the counters, nor on the switch. */
    free(expect_failure("SELECT * FROM outbox.aggregate_heads", "42501"));
    free(expect_failure("UPDATE outbox.aggregate_heads SET last_seq = 1", "42501"));
    message = expect_failure("SELECT outbox.set_ordering(false)", "42501");
    free(message);
    harness_exec(conn, "RESET ROLE");
    expect_numbers(agg, "1,2,3");
    snprintf(sql, sizeof(sql), "DROP OWNED BY %s; DROP ROLE %s", quoted, quoted);
    harness_exec(conn, sql);
    PQfreemem(quoted);
}

Test(aggregate_seq, a_callers_search_path_cannot_reach_into_the_trigger)
{
    /* A schema of the caller's, searched before pg_catalog, with an operator that
     * would hijack an unqualified bigint + integer. */
    harness_exec(conn, "CREATE SCHEMA evil; CREATE FUNCTION evil.plus(bigint, integer)"
                       " RETURNS bigint LANGUAGE sql AS 'SELECT 1000::bigint';"
                       " CREATE OPERATOR evil.+ (LEFTARG = bigint, RIGHTARG = integer,"
                       " FUNCTION = evil.plus)");
    cr_expect_eq(enqueue_sql(conn, agg, "created"), 1);
    harness_exec(conn, "SET search_path = evil, pg_catalog");
    cr_expect_eq(enqueue_sql(conn, agg, "paid"), 2);
    harness_exec(conn, "RESET search_path");
    expect_numbers(agg, "1,2");
}

Test(aggregate_seq, a_schema_switched_off_gives_no_numbers)
{
    PGconn *c = harness_pg_connect_fresh();

    cr_expect_eq(harness_scalar_ll(c, "SELECT outbox.ordering_on()::int"), 0);
    harness_exec(c, "SELECT outbox.enqueue('order', '0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', 'x',"
                    " '{}')");
    cr_expect_eq(harness_scalar_ll(c, "SELECT count(aggregate_seq) FROM outbox.events"), 0);
    cr_expect_eq(harness_scalar_ll(c, "SELECT count(*) FROM outbox.aggregate_heads"), 0);
    PQfinish(c);
}

Test(aggregate_seq, a_repeatable_read_writer_behind_a_newer_event_must_retry)
{
    PGconn *rr = PQconnectdb(harness_db_url());
    PGresult *res;

    cr_assert_eq(PQstatus(rr), CONNECTION_OK);
    cr_expect_eq(enqueue_sql(conn, agg, "created"), 1);
    /* Its snapshot is taken before another transaction's event of the aggregate commits. */
    harness_exec(rr, "BEGIN ISOLATION LEVEL REPEATABLE READ");
    harness_exec(rr, "SELECT 1");
    cr_expect_eq(enqueue_sql(conn, agg, "paid"), 2);
    res = PQexec(rr, "SELECT outbox.enqueue('order', '0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', "
                     "'late', '{}')");
    cr_expect_str_eq(PQresultErrorField(res, PG_DIAG_SQLSTATE), "40001", "%s",
                     PQresultErrorMessage(res));
    PQclear(res);
    harness_exec(rr, "ROLLBACK");
    /* Retried, it gets the next number. */
    cr_expect_eq(enqueue_sql(rr, agg, "late"), 3);
    PQfinish(rr);
    expect_numbers(agg, "1,2,3");
}
