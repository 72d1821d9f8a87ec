/* SPDX-License-Identifier: MIT */
/*
 * test_sql_writer_rules.c - the row rules run once: outbox.enqueue() and
 * outbox.enqueue_many() validate an event and the row trigger skips the
 * rows they have just validated, but nothing else. A hand-written bad row
 * is still refused with the rule's name and SQLSTATE 23514: alone, right
 * after an enqueue() or enqueue_many() in the same transaction, after a
 * refused enqueue(), and as an UPDATE of a row enqueue() wrote. The count
 * of trigger calls (pg_stat_xact_user_functions) shows the skip; the
 * wake-up trigger runs once per transaction. Also enqueue_many()'s own
 * contract: ids in order, all-or-nothing, its refusals.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    /* Counts calls of PL/pgSQL functions; SQL functions are still inlined. */
    harness_exec(conn, "SET track_functions = 'pl'");
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(sql_writer_rules, .init = setup, .fini = teardown, .timeout = 60);

static const char good_enqueue[] = "SELECT outbox.enqueue('movie', "
                                   "'0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', 'review.logged', "
                                   "'{\"stars\": 5}')";

static const char good_many[] =
    "SELECT outbox.enqueue_many('["
    "{\"aggregate_type\": \"movie\", \"aggregate_id\": \"0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b\", "
    "\"event_type\": \"review.logged\", \"payload\": {\"stars\": 5}}, "
    "{\"aggregate_type\": \"movie\", \"aggregate_id\": \"0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b\", "
    "\"event_type\": \"review.logged\", \"payload\": {\"stars\": 4}, \"tenant_id\": \"acme\"}]')";

/* A row whose envelope is not a v1 envelope: the trigger must refuse it. */
static const char bad_insert[] =
    "INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, envelope) "
    "VALUES (gen_random_uuid(), 'movie', gen_random_uuid(), 'review.logged', '{}')";

static long long
event_count(void)
{
    return harness_scalar_ll(conn, "SELECT count(*) FROM outbox.events");
}

/*
 * Calls of outbox.<name>() not yet flushed to the shared statistics. A
 * backend flushes only between transactions (and at most once a second),
 * so within a transaction the difference of two readings is exact.
 */
static long long
calls_of(const char *name)
{
    char sql[256];

    snprintf(sql, sizeof(sql),
             "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions "
             "WHERE schemaname = 'outbox' AND funcname = '%s'",
             name);
    return harness_scalar_ll(conn, sql);
}

/* `sql` fails with SQLSTATE 23514 and names the rule events_envelope_v1. */
static void
expect_rule_refusal(const char *sql, const char *when)
{
    PGresult *res = PQexec(conn, sql);
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *rule = PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME);

    cr_expect_eq(PQresultStatus(res), PGRES_FATAL_ERROR, "%s: a bad row was accepted", when);
    cr_expect_str_eq(state ? state : "", "23514", "%s: %s", when, PQresultErrorMessage(res));
    cr_expect_str_eq(rule ? rule : "", "events_envelope_v1", "%s: %s", when,
                     PQresultErrorMessage(res));
    cr_expect(strstr(PQresultErrorMessage(res),
                     "new row for relation \"events\" violates check constraint "
                     "\"events_envelope_v1\"") != NULL,
              "%s: %s", when, PQresultErrorMessage(res));
    PQclear(res);
}

Test(sql_writer_rules, a_hand_written_bad_row_is_refused)
{
    expect_rule_refusal(bad_insert, "alone");
    cr_expect_eq(event_count(), 0);
}

Test(sql_writer_rules, a_bad_row_after_enqueue_in_the_same_transaction_is_refused)
{
    PGresult *res;

    harness_exec(conn, "BEGIN");
    harness_exec(conn, good_enqueue);
    expect_rule_refusal(bad_insert, "after enqueue()");
    harness_exec(conn, "ROLLBACK");

    harness_exec(conn, "BEGIN");
    harness_exec(conn, good_many);
    expect_rule_refusal(bad_insert, "after enqueue_many()");
    harness_exec(conn, "ROLLBACK");

    /* A refused enqueue() (in a savepoint the caller rolls back to) leaves nothing open. */
    harness_exec(conn, "BEGIN");
    harness_exec(conn, "SAVEPOINT s");
    res = PQexec(conn, "SELECT outbox.enqueue('movie', '0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', "
                       "'movie.logged', '{}')");
    cr_expect_eq(PQresultStatus(res), PGRES_FATAL_ERROR);
    PQclear(res);
    harness_exec(conn, "ROLLBACK TO SAVEPOINT s");
    expect_rule_refusal(bad_insert, "after a refused enqueue()");
    harness_exec(conn, "ROLLBACK");
    cr_expect_eq(event_count(), 0);
}

Test(sql_writer_rules, breaking_a_row_enqueue_just_wrote_is_refused)
{
    char *id;
    char sql[256];

    harness_exec(conn, "BEGIN");
    id = harness_scalar_text(conn, good_enqueue);
    snprintf(sql, sizeof(sql),
             "UPDATE outbox.events SET envelope = envelope - 'schema_version' WHERE id = '%s'", id);
    expect_rule_refusal(sql, "an UPDATE of the enqueued row");
    harness_exec(conn, "ROLLBACK");
    free(id);
}

Test(sql_writer_rules, the_skip_is_off_once_the_writers_return)
{
    harness_exec(conn, "BEGIN");
    harness_exec(conn, good_enqueue);
    harness_exec(conn, good_many);
    cr_expect_eq(harness_scalar_ll(conn, "SELECT count(*) WHERE coalesce(current_setting("
                                         "'outbox.rows_validated', true), '') = ''"),
                 1, "outbox.rows_validated is left on after the writers returned");
    harness_exec(conn, "COMMIT");
}

Test(sql_writer_rules, rows_the_sql_writers_validated_are_not_checked_again)
{
    long long before;

    harness_exec(conn, "BEGIN");
    before = calls_of("events_row_check");
    harness_exec(conn, good_enqueue);
    harness_exec(conn, good_enqueue);
    harness_exec(conn, good_many);
    cr_expect_eq(calls_of("events_row_check") - before, 0,
                 "the row trigger checked rows the SQL writers wrote");
    /* Any other insert is checked: a good hand-written row runs the trigger once. */
    harness_exec(conn,
                 "INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, "
                 "envelope) SELECT id, 'movie', '0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', "
                 "'review.logged', jsonb_build_object('id', id, 'event_type', 'review.logged', "
                 "'aggregate_type', 'movie', 'aggregate_id', "
                 "'0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', 'occurred_at', "
                 "'2026-11-29T09:41:56.123Z', 'schema_version', 1, 'payload', '{}'::jsonb) "
                 "FROM (SELECT gen_random_uuid() AS id) AS g");
    cr_expect_eq(calls_of("events_row_check") - before, 1);
    harness_exec(conn, "COMMIT");
    cr_expect_eq(event_count(), 5);
}

Test(sql_writer_rules, the_wakeup_trigger_runs_once_per_transaction)
{
    long long before;

    for (int t = 0; t < 2; t++) {
        harness_exec(conn, "BEGIN");
        before = calls_of("events_wakeup");
        for (int i = 0; i < 5; i++) {
            harness_exec(conn, good_enqueue);
        }
        harness_exec(conn, good_many);
        cr_expect_eq(calls_of("events_wakeup") - before, 1, "transaction %d", t + 1);
        harness_exec(conn, "COMMIT");
    }
}

Test(sql_writer_rules, a_listening_relay_is_woken_by_an_enqueue_transaction)
{
    PGconn *listener = PQconnectdb(harness_db_url());
    PGnotify *note = NULL;
    long long deadline;

    cr_assert_eq(PQstatus(listener), CONNECTION_OK, "%s", PQerrorMessage(listener));
    harness_exec(listener, "SELECT outbox.wakeup_listen('outbox')");
    harness_exec(conn, "BEGIN");
    harness_exec(conn, good_enqueue);
    harness_exec(conn, good_enqueue);
    harness_exec(conn, "COMMIT");
    deadline = harness_now_ms() + 5000;
    while (note == NULL && harness_now_ms() < deadline) {
        PQconsumeInput(listener);
        note = PQnotifies(listener);
        if (note == NULL) {
            harness_sleep_ms(20);
        }
    }
    cr_expect_not_null(note, "no wake-up notification arrived");
    PQfreemem(note);
    PQfinish(listener);
}

/* ---- enqueue_many()'s own contract ---------------------------------------------------- */

/* `sql` fails with SQLSTATE 22023 and exactly `message`. */
static void
expect_refusal(const char *sql, const char *message)
{
    PGresult *res = PQexec(conn, sql);
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *got = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);

    cr_expect_eq(PQresultStatus(res), PGRES_FATAL_ERROR, "%s: accepted", sql);
    cr_expect_str_eq(state ? state : "", "22023", "%s", sql);
    cr_expect_str_eq(got ? got : "", message);
    PQclear(res);
}

Test(sql_writer_rules, enqueue_many_returns_the_ids_in_order_with_one_occurred_at)
{
    char *ids = harness_scalar_text(conn, good_many);
    PGresult *res;

    cr_assert_eq(strlen(ids), 2 + 36 * 2 + 1, "%s", ids);
    res = PQexec(conn, "SELECT e.id::text, e.envelope ->> 'occurred_at', e.tenant_id, "
                       "e.envelope -> 'payload' ->> 'stars' "
                       "FROM outbox.events AS e ORDER BY e.id");
    cr_assert_eq(PQntuples(res), 2);
    cr_expect(strncmp(ids + 1, PQgetvalue(res, 0, 0), 36) == 0, "%s", ids);
    cr_expect(strncmp(ids + 38, PQgetvalue(res, 1, 0), 36) == 0, "%s", ids);
    cr_expect_str_eq(PQgetvalue(res, 0, 3), "5", "the first id is not the first event's");
    cr_expect_str_eq(PQgetvalue(res, 1, 2), "acme");
    cr_expect_str_eq(PQgetvalue(res, 0, 1), PQgetvalue(res, 1, 1));
    PQclear(res);
    free(ids);
    ids = harness_scalar_text(conn, "SELECT outbox.enqueue_many('[]')");
    cr_expect_str_eq(ids, "{}");
    free(ids);
}

Test(sql_writer_rules, enqueue_many_refuses_what_is_not_an_array_of_events)
{
    expect_refusal("SELECT outbox.enqueue_many(NULL)", "events is required");
    expect_refusal("SELECT outbox.enqueue_many('{}')", "events must be a JSON array, not object");
    expect_refusal("SELECT outbox.enqueue_many('[\"x\"]')",
                   "events[0]: an event must be a JSON object, not string");
    expect_refusal("SELECT outbox.enqueue_many('[{\"aggregate_type\": \"movie\", "
                   "\"aggregate_id\": \"0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b\", "
                   "\"event_type\": \"review.logged\", \"payload\": {}, \"tenantId\": \"a\"}]')",
                   "events[0]: unknown field \"tenantId\"");
    expect_refusal("SELECT outbox.enqueue_many('[{\"aggregate_type\": 7, "
                   "\"aggregate_id\": \"0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b\", "
                   "\"event_type\": \"review.logged\", \"payload\": {}}]')",
                   "events[0]: aggregate_type must be a JSON string, not number");
    expect_refusal("SELECT outbox.enqueue_many('[{\"aggregate_type\": \"movie\", "
                   "\"aggregate_id\": \"0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b\", "
                   "\"event_type\": \"review.logged\", \"payload\": {}, "
                   "\"tenant_id\": [\"acme\"]}]')",
                   "events[0]: tenant_id must be a JSON string, not array");
    cr_expect_eq(event_count(), 0);
}

Test(sql_writer_rules, enqueue_many_follows_the_size_setting_and_writes_nothing_on_refusal)
{
    PGresult *res;
    const char *message;

    harness_exec(conn, "SET outbox.max_envelope_bytes = 1024");
    res = PQexec(conn, "SELECT outbox.enqueue_many(jsonb_build_array("
                       "jsonb_build_object('aggregate_type', 'movie', 'aggregate_id', "
                       "'0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', 'event_type', 'review.logged', "
                       "'payload', '{}'::jsonb), "
                       "jsonb_build_object('aggregate_type', 'movie', 'aggregate_id', "
                       "'0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', 'event_type', 'review.logged', "
                       "'payload', jsonb_build_object('t', repeat('x', 1200)))))");
    message = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    cr_expect_eq(PQresultStatus(res), PGRES_FATAL_ERROR,
                 "a 1,400-byte envelope passed a 1024 limit");
    cr_expect(message != NULL && strncmp(message, "events[1]: envelope is ", 23) == 0 &&
                  strstr(message, "bytes, over the limit of 1024") != NULL,
              "%s", message ? message : "(none)");
    PQclear(res);
    cr_expect_eq(event_count(), 0, "the first, valid event of the refused call was written");
    harness_exec(conn, "RESET outbox.max_envelope_bytes");
    free(harness_scalar_text(conn, good_many));
    cr_expect_eq(event_count(), 2);
}

/* `sql` fails with SQLSTATE 22023 and a message naming the size setting and `value`. */
static void
expect_setting_refused(const char *sql, const char *value)
{
    PGresult *res = PQexec(conn, sql);
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *message = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    char named[128];

    snprintf(named, sizeof(named), "outbox.max_envelope_bytes=\"%s\"", value);
    cr_expect_eq(PQresultStatus(res), PGRES_FATAL_ERROR, "%s ran with the setting '%s'", sql,
                 value);
    cr_expect(state != NULL && strcmp(state, "22023") == 0, "'%s': SQLSTATE %s", value,
              state ? state : "(none)");
    cr_expect(message != NULL && strstr(message, named) != NULL &&
                  strstr(message, "must be a whole number from 1024 to 67108864") != NULL,
              "'%s': %s", value, message ? message : "(none)");
    PQclear(res);
}

Test(sql_writer_rules, a_bad_size_setting_is_refused_naming_the_setting_and_its_value)
{
    /* The C writer's bounds. Before, 'abc' failed with 22P02 naming no setting, 0 and -1
     * refused every event as too large, and 2000000000 let a 2 MB event commit that the
     * relay then quarantined. */
    static const char *const bad[] = {"abc",      "0",           "-1",  "2000000000", "1023",
                                      "67108865", "99999999999", "1e6", "512 KiB"};
    static const char *const good[] = {"1024", "67108864", " 2048 ", "+4096"};
    char sql[128];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(sql, sizeof(sql), "SET outbox.max_envelope_bytes = '%s'", bad[i]);
        harness_exec(conn, sql);
        expect_setting_refused(good_enqueue, bad[i]);
        expect_setting_refused(good_many, bad[i]);
    }
    cr_expect_eq(event_count(), 0);
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        snprintf(sql, sizeof(sql), "SET outbox.max_envelope_bytes = '%s'", good[i]);
        harness_exec(conn, sql);
        free(harness_scalar_text(conn, good_enqueue));
    }
    harness_exec(conn, "RESET outbox.max_envelope_bytes");
    free(harness_scalar_text(conn, good_many));
    cr_expect_eq(event_count(), 6, "in-range values, and the default, still write");
}

/*
 * The fast check the writers run, event_ok(), must accept exactly what
 * event_error() (which words the refusals) finds nothing wrong with: one
 * field at a time varied from a good event over each rule's edges, and
 * aggregate_type x event_type for the route rules that involve both.
 */
Test(sql_writer_rules, the_fast_check_agrees_with_the_worded_rules_at_every_edge)
{
    static const char sql[] =
        "WITH base AS (SELECT 'movie'::text AS at, '0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b'::text "
        "AS ag, 'review.logged'::text AS et, '{\"stars\": 5}'::jsonb AS pl, NULL::text AS tn, "
        "NULL::text AS ds, NULL::text AS tp), "
        "ats(v) AS (VALUES (NULL), (''), ('movie'), ('mo vie'), ('movie.review'), ('*'), "
        "('Mo_v-1e'), (repeat('a', 111)), (E'movi\\u00e9'), ('review')), "
        "ets(v) AS (VALUES (NULL), (''), ('review.logged'), ('review..logged'), ('review.'), "
        "('.review'), ('movie.logged'), ('movie'), ('>'), (repeat('b', 110)), (repeat('b', 111)), "
        "(E'review\\r\\nlogged'), ('a.b.c_d-e')), "
        "ags(v) AS (VALUES (NULL), ('0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b'), "
        "('0190A3B2-1C2D-7E3F-8A9B-0C1D2E3F4A5B'), ('{0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b}'), "
        "('0190a3b21c2d7e3f8a9b0c1d2e3f4a5b'), ('0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a-b'), "
        "('0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5g'), ('0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5'), "
        "('0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5bb'), ('0190a3b2--1c2d-7e3f-8a9b0c1d2e3f4a5b'), "
        "('xyz'), ('')), "
        "pls(v) AS (VALUES (NULL::jsonb), ('{}'), ('[]'), ('null'), ('5'), ('\"s\"'), "
        "('{\"x\": 1e400}'), ('{\"a\": [1, {\"b\": -1e309}]}'), ('{\"x\": "
        "1.7976931348623157e308}'), "
        "('{\"x\": 1e-400}'), ((repeat('{\"a\": ', 63) || '{}' || repeat('}', 63))::jsonb), "
        "((repeat('{\"a\": ', 64) || '{}' || repeat('}', 64))::jsonb), "
        "((repeat('{\"a\": ', 62) || '[[]]' || repeat('}', 62))::jsonb), "
        "((repeat('{\"a\": ', 63) || '[[]]' || repeat('}', 63))::jsonb)), "
        "txt(v) AS (VALUES (NULL), (''), ('acme'), (repeat('t', 128)), (repeat('t', 129)), "
        "(repeat('t', 256)), (repeat('t', 257)), (E'a\\tb'), (E'a\\nb'), (E'a\\x7fb'), "
        "(E'a\\x1fb'), ('a b \"c\"')), "
        "tps(v) AS (VALUES (NULL), ('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'), "
        "('01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'), "
        "('00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01'), "
        "('00-00000000000000000000000000000000-b7ad6b7169203331-01'), "
        "('00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01'), "
        "('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331'), ('')), "
        "probes AS ("
        " SELECT a.v AS at, b.ag, e.v AS et, b.pl, b.tn, b.ds, b.tp FROM base b, ats a, ets e"
        " UNION ALL SELECT b.at, g.v, b.et, b.pl, b.tn, b.ds, b.tp FROM base b, ags g"
        " UNION ALL SELECT b.at, b.ag, b.et, p.v, b.tn, b.ds, b.tp FROM base b, pls p"
        " UNION ALL SELECT b.at, b.ag, b.et, b.pl, t.v, b.ds, b.tp FROM base b, txt t"
        " UNION ALL SELECT b.at, b.ag, b.et, b.pl, b.tn, t.v, b.tp FROM base b, txt t"
        " UNION ALL SELECT b.at, b.ag, b.et, b.pl, b.tn, b.ds, t.v FROM base b, tps t) "
        "SELECT count(*), count(*) FILTER (WHERE outbox.event_ok(at, ag, et, pl, tn, ds, tp)), "
        "count(*) FILTER (WHERE outbox.event_ok(at, ag, et, pl, tn, ds, tp) "
        "IS DISTINCT FROM (outbox.event_error(at, ag, et, pl, tn, ds, tp) IS NULL)), "
        "coalesce(string_agg(format('%s|%s|%s|%s|%s|%s|%s', at, ag, et, left(pl::text, 40), tn, "
        "ds, tp), E'\\n') FILTER (WHERE outbox.event_ok(at, ag, et, pl, tn, ds, tp) "
        "IS DISTINCT FROM (outbox.event_error(at, ag, et, pl, tn, ds, tp) IS NULL)), '') "
        "FROM probes";
    PGresult *res = PQexec(conn, sql);

    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(res));
    cr_expect_gt(atol(PQgetvalue(res, 0, 0)), 150, "too few probes: %s", PQgetvalue(res, 0, 0));
    cr_expect_gt(atol(PQgetvalue(res, 0, 1)), 20, "too few accepted probes");
    cr_expect_str_eq(PQgetvalue(res, 0, 2), "0", "event_ok() and event_error() disagree on:\n%s",
                     PQgetvalue(res, 0, 3));
    PQclear(res);
}
