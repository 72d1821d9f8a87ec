/* SPDX-License-Identifier: MIT */
/*
 * test_sql_writer.c - outbox.enqueue(), the writer for psql, Go, Python...:
 * the id it returns is a fresh UUIDv7 that is also the row's and the
 * envelope's id, the size limit follows the outbox.max_envelope_bytes
 * setting, and a role allowed only to insert events can use it (and
 * outbox.enqueue_many()).
 * Time is the database's: the id's timestamp is checked against it.
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
    conn = harness_pg_connect_fresh();
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(sql_writer, .init = setup, .fini = teardown, .timeout = 60);

static const char aggregate_id[] = "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b";

/* outbox.enqueue() with `payload`; returns the result, which the caller checks and clears. */
static PGresult *
enqueue_sql(PGconn *c, const char *payload)
{
    const char *params[] = {"movie", aggregate_id, "review.logged", payload};

    return PQexecParams(c, "SELECT outbox.enqueue($1, $2, $3, $4::jsonb)", 4, NULL, params, NULL,
                        NULL, 0);
}

/* Same, asserting success; returns the id (malloc'd). */
static char *
enqueue_sql_ok(PGconn *c, const char *payload)
{
    PGresult *res = enqueue_sql(c, payload);
    char *id;

    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(res));
    id = strdup(PQgetvalue(res, 0, 0));
    PQclear(res);
    return id;
}

static long long
event_count(void)
{
    return harness_scalar_ll(conn, "SELECT count(*) FROM outbox.events");
}

static long long
db_now_ms(void)
{
    return harness_scalar_ll(conn, "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)");
}

/* The 48-bit Unix millisecond timestamp at the front of a UUIDv7's text form. */
static long long
uuid7_ms(const char *id)
{
    char hex[13];

    memcpy(hex, id, 8);
    memcpy(hex + 8, id + 9, 4);
    hex[12] = '\0';
    return strtoll(hex, NULL, 16);
}

Test(sql_writer, returns_a_fresh_uuidv7_that_is_the_row_and_envelope_id)
{
    long long before_ms = db_now_ms();
    char *id = enqueue_sql_ok(conn, "{}");
    long long after_ms = db_now_ms();
    const char *params[1] = {id};
    PGresult *res;

    cr_assert_eq(strlen(id), 36, "%s", id);
    cr_expect_eq(id[14], '7', "version nibble of %s is not 7", id);
    cr_expect(strchr("89ab", id[19]) != NULL, "variant of %s is not 10", id);
    cr_expect(uuid7_ms(id) >= before_ms && uuid7_ms(id) <= after_ms,
              "timestamp of %s is %lld, outside the call [%lld, %lld]", id, uuid7_ms(id), before_ms,
              after_ms);

    res = PQexecParams(conn, "SELECT id::text, envelope ->> 'id' FROM outbox.events", 0, NULL, NULL,
                       NULL, NULL, 0);
    cr_assert_eq(PQntuples(res), 1);
    cr_expect_str_eq(PQgetvalue(res, 0, 0), id, "row id");
    cr_expect_str_eq(PQgetvalue(res, 0, 1), id, "envelope id");
    PQclear(res);

    /* occurred_at is the same instant as the id's timestamp. */
    res = PQexecParams(conn,
                       "SELECT floor(extract(epoch FROM (envelope ->> 'occurred_at')::timestamptz)"
                       " * 1000)::bigint::text FROM outbox.events WHERE id = $1::uuid",
                       1, NULL, params, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(res));
    cr_expect_eq(strtoll(PQgetvalue(res, 0, 0), NULL, 10), uuid7_ms(id));
    PQclear(res);
    free(id);
}

Test(sql_writer, ids_from_many_calls_in_one_session_are_unique_uuidv7s)
{
    enum { CALLS = 3000 };
    char sql[512];
    PGresult *res;
    char *one, *two;

    /* Many calls inside one statement land in the same milliseconds. */
    snprintf(sql, sizeof(sql),
             "SELECT count(*), count(DISTINCT id), "
             "count(*) FILTER (WHERE substr(id::text, 15, 1) = '7' "
             "AND substr(id::text, 20, 1) IN ('8', '9', 'a', 'b')) "
             "FROM (SELECT outbox.enqueue('movie', '%s', 'review.logged', "
             "jsonb_build_object('n', n)) AS id FROM generate_series(1, %d) AS n) AS calls",
             aggregate_id, CALLS);
    res = PQexec(conn, sql);
    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(res));
    cr_expect_eq(atoi(PQgetvalue(res, 0, 0)), CALLS);
    cr_expect_eq(atoi(PQgetvalue(res, 0, 1)), CALLS, "duplicate ids");
    cr_expect_eq(atoi(PQgetvalue(res, 0, 2)), CALLS, "ids that are not UUIDv7");
    PQclear(res);

    /* And across statements. */
    one = enqueue_sql_ok(conn, "{}");
    two = enqueue_sql_ok(conn, "{}");
    cr_expect_str_neq(one, two);
    cr_expect_eq(event_count(), CALLS + 2);
    cr_expect_eq(harness_scalar_ll(conn, "SELECT count(DISTINCT id) FROM outbox.events"),
                 CALLS + 2);
    free(one);
    free(two);
}

/* A payload whose envelope is about 3 KB. */
static char *
payload_of_3k(void)
{
    char *p = malloc(3000 + 16);

    cr_assert_not_null(p);
    memcpy(p, "{\"t\": \"", 7);
    memset(p + 7, 'x', 3000);
    memcpy(p + 3007, "\"}", 3);
    return p;
}

Test(sql_writer, the_max_envelope_bytes_setting_lowers_the_limit)
{
    char *big = payload_of_3k();
    char *id;
    PGresult *res;

    id = enqueue_sql_ok(conn, big);
    free(id);

    harness_exec(conn, "SET outbox.max_envelope_bytes = 2048");
    res = enqueue_sql(conn, big);
    cr_expect_eq(PQresultStatus(res), PGRES_FATAL_ERROR, "a 3 KB envelope passed a 2 KB limit");
    cr_expect_str_eq(PQresultErrorField(res, PG_DIAG_SQLSTATE), "22023");
    cr_expect(strstr(PQresultErrorMessage(res), "over the limit of 2048") != NULL, "%s",
              PQresultErrorMessage(res));
    PQclear(res);
    id = enqueue_sql_ok(conn, "{\"stars\": 5}");
    free(id);

    /* SET LOCAL lasts one transaction. */
    harness_exec(conn, "RESET outbox.max_envelope_bytes");
    harness_exec(conn, "BEGIN");
    harness_exec(conn, "SET LOCAL outbox.max_envelope_bytes = 1024");
    res = enqueue_sql(conn, big);
    cr_expect_eq(PQresultStatus(res), PGRES_FATAL_ERROR);
    cr_expect(strstr(PQresultErrorMessage(res), "over the limit of 1024") != NULL, "%s",
              PQresultErrorMessage(res));
    PQclear(res);
    harness_exec(conn, "ROLLBACK");
    id = enqueue_sql_ok(conn, big);
    free(id);
    cr_expect_eq(event_count(), 3);
    free(big);
}

Test(sql_writer, refuses_a_bad_event_with_sqlstate_22023_and_stores_nothing)
{
    const char *params[] = {"movie", aggregate_id, "movie.logged", "{}"};
    PGresult *res = PQexecParams(conn, "SELECT outbox.enqueue($1, $2, $3, $4::jsonb)", 4, NULL,
                                 params, NULL, NULL, 0);

    cr_expect_eq(PQresultStatus(res), PGRES_FATAL_ERROR);
    cr_expect_str_eq(PQresultErrorField(res, PG_DIAG_SQLSTATE), "22023");
    cr_expect_str_eq(PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY),
                     "event_type \"movie.logged\" must not start with aggregate_type \"movie.\"");
    PQclear(res);
    cr_expect_eq(event_count(), 0);
}

/* Runs `sql` expecting failure with `sqlstate`. */
static void
expect_sqlstate(const char *sql, const char *sqlstate)
{
    PGresult *res = PQexec(conn, sql);
    const char *got = PQresultErrorField(res, PG_DIAG_SQLSTATE);

    cr_expect_eq(PQresultStatus(res), PGRES_FATAL_ERROR, "%s: succeeded", sql);
    cr_expect_str_eq(got ? got : "", sqlstate, "%s: %s", sql, PQresultErrorMessage(res));
    PQclear(res);
}

Test(sql_writer, works_for_a_role_that_may_only_insert_events)
{
    char role[96];
    char sql[512];
    char *quoted;
    char *id;
    outbox_event *ev = outbox_event_new();
    outbox_error err;

    /* Roles are cluster-wide: name it after this test's database. */
    snprintf(role, sizeof(role), "w_%s", PQdb(conn));
    quoted = PQescapeIdentifier(conn, role, strlen(role));
    snprintf(sql, sizeof(sql),
             "CREATE ROLE %s NOLOGIN; GRANT USAGE ON SCHEMA outbox TO %s; "
             "GRANT INSERT ON outbox.events TO %s; SET ROLE %s",
             quoted, quoted, quoted, quoted);
    harness_exec(conn, sql);

    /* The SQL writer, one event and a batch. */
    id = enqueue_sql_ok(conn, "{\"stars\": 5}");
    free(id);
    id =
        harness_scalar_text(conn, "SELECT outbox.enqueue_many(jsonb_build_array(jsonb_build_object("
                                  "'aggregate_type', 'movie', 'aggregate_id', "
                                  "'0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', 'event_type', "
                                  "'review.logged', 'payload', '{}'::jsonb)))");
    cr_expect_eq(strlen(id), 38, "%s", id);
    free(id);
    /* The C writer, in the role's own transaction. */
    cr_assert_eq(outbox_event_set_route(ev, "movie", "review.logged", &err), OUTBOX_OK);
    cr_assert_eq(outbox_event_set_aggregate_id(ev, aggregate_id, &err), OUTBOX_OK);
    cr_assert_eq(outbox_event_set_payload_json(ev, "{}", 2, &err), OUTBOX_OK);
    harness_exec(conn, "BEGIN");
    cr_assert_eq(outbox_enqueue(conn, ev, &err), OUTBOX_OK, "%s", err.message);
    harness_exec(conn, "COMMIT");
    /* It really is that narrow: it cannot read or change the outbox. */
    expect_sqlstate("SELECT count(*) FROM outbox.events", "42501");
    expect_sqlstate("DELETE FROM outbox.events", "42501");

    harness_exec(conn, "RESET ROLE");
    cr_expect_eq(event_count(), 3);
    snprintf(sql, sizeof(sql), "DROP OWNED BY %s; DROP ROLE %s", quoted, quoted);
    harness_exec(conn, sql);
    PQfreemem(quoted);
    outbox_event_free(ev);
}
