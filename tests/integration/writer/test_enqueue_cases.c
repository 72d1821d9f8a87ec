/* SPDX-License-Identifier: MIT */
/*
 * test_enqueue_cases.c - the shared envelope corpus (tests/data/envelopes)
 * through both writers into a real database: the C API (json_t and text
 * payloads), the SQL function outbox.enqueue() and the set-based
 * outbox.enqueue_many(). Valid cases must be stored alike by all; invalid
 * ones refused by all with the expected message (enqueue_many() prefixes
 * the element's index), storing nothing. This is what keeps the two validators in step.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envelope_cases.h"
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

TestSuite(enqueue_cases, .init = setup, .fini = teardown, .timeout = 120);

static const char sql_enqueue[] = "SELECT outbox.enqueue($1, $2, $3, $4::jsonb, $5, $6, $7)";

static long long
event_count(void)
{
    return harness_scalar_ll(conn, "SELECT count(*) FROM outbox.events");
}

/* Runs the SQL writer with the case's fields as text parameters (NULL when absent); on
 * success returns the new id (malloc'd), else NULL. `*res_out` receives the result. */
static char *
sql_writer(const struct envelope_case *c, PGresult **res_out)
{
    const char *params[7] = {c->aggregate_type, c->aggregate_id, c->event_type, c->payload_text,
                             c->tenant_id,      c->data_subject, c->traceparent};
    PGresult *res = PQexecParams(conn, sql_enqueue, 7, NULL, params, NULL, NULL, 0);
    char *id = NULL;

    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        id = strdup(PQgetvalue(res, 0, 0));
    }
    *res_out = res;
    return id;
}

/* Builds and enqueues through the C writer; returns the event (caller frees) or NULL. */
static outbox_event *
c_writer(const struct envelope_case *c, int in_memory, outbox_error *err)
{
    outbox_event *ev = NULL;
    outbox_status st = envelope_case_build(c, in_memory, &ev, err);

    if (st == OUTBOX_OK) {
        st = outbox_enqueue(conn, ev, err);
    }
    if (st != OUTBOX_OK) {
        outbox_event_free(ev);
        ev = NULL;
    }
    return ev;
}

/* 1 when both rows' envelopes are equal as jsonb, leaving out id and occurred_at. */
static int
same_envelope(const char *id_a, const char *id_b, char **a_text, char **b_text)
{
    const char *params[] = {id_a, id_b};
    PGresult *res = PQexecParams(
        conn,
        "SELECT (a.envelope - 'id' - 'occurred_at') = (b.envelope - 'id' - 'occurred_at'), "
        "a.envelope::text, b.envelope::text "
        "FROM outbox.events a, outbox.events b WHERE a.id = $1::uuid AND b.id = $2::uuid",
        2, NULL, params, NULL, NULL, 0);
    int same;

    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(res));
    cr_assert_eq(PQntuples(res), 1, "rows %s and %s are not both stored", id_a, id_b);
    same = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    *a_text = strdup(PQgetvalue(res, 0, 1));
    *b_text = strdup(PQgetvalue(res, 0, 2));
    PQclear(res);
    return same;
}

static void
expect_same_envelope(const char *name, const char *what, const char *c_id, const char *sql_id)
{
    char *c_text, *sql_text;

    cr_expect(same_envelope(c_id, sql_id, &c_text, &sql_text),
              "valid/%s: %s and SQL writers stored different envelopes:\n  C   %s\n  SQL %s", name,
              what, c_text, sql_text);
    free(c_text);
    free(sql_text);
}

Test(enqueue_cases, every_valid_case_is_stored_alike_by_the_c_and_sql_writers)
{
    struct envelope_case *cases;
    size_t count = envelope_cases_load("valid", &cases);
    long long stored = 0;

    cr_assert_gt(count, 10, "too few valid cases found");
    for (size_t i = 0; i < count; i++) {
        const struct envelope_case *c = &cases[i];
        outbox_event *text_ev, *memory_ev;
        outbox_error err;
        PGresult *res;
        char *sql_id;

        harness_exec(conn, "BEGIN");
        text_ev = c_writer(c, 0, &err);
        cr_expect_not_null(text_ev, "valid/%s (text): %s %s", c->name, outbox_status_name(err.code),
                           err.message);
        memory_ev = c_writer(c, 1, &err);
        cr_expect_not_null(memory_ev, "valid/%s (json_t): %s %s", c->name,
                           outbox_status_name(err.code), err.message);
        harness_exec(conn, "COMMIT");

        sql_id = sql_writer(c, &res);
        cr_expect_not_null(sql_id, "valid/%s (SQL): %s", c->name, PQresultErrorMessage(res));
        PQclear(res);
        stored += (text_ev != NULL) + (memory_ev != NULL) + (sql_id != NULL);
        if (sql_id != NULL && text_ev != NULL) {
            expect_same_envelope(c->name, "C (text)", outbox_event_id(text_ev), sql_id);
        }
        if (sql_id != NULL && memory_ev != NULL) {
            expect_same_envelope(c->name, "C (json_t)", outbox_event_id(memory_ev), sql_id);
        }
        free(sql_id);
        outbox_event_free(memory_ev);
        outbox_event_free(text_ev);
    }
    cr_expect_eq(event_count(), stored);
    cr_expect_eq(stored, (long long)count * 3);
    envelope_cases_free(cases, count);
}

/* The C writer refuses `c` with OUTBOX_EINVAL and its message, inside an open transaction. */
static void
expect_c_refusal(const struct envelope_case *c, int in_memory)
{
    const char *how = in_memory ? "json_t" : "text";
    outbox_error err = {0};
    outbox_event *ev = c_writer(c, in_memory, &err);

    cr_expect_null(ev, "invalid/%s (%s): the C writer accepted it", c->name, how);
    cr_expect_eq(err.code, OUTBOX_EINVAL, "invalid/%s (%s): got %s \"%s\"", c->name, how,
                 outbox_status_name(err.code), err.message);
    cr_expect(strstr(err.message, c->expected_error) != NULL,
              "invalid/%s (%s): message \"%s\" lacks \"%s\"", c->name, how, err.message,
              c->expected_error);
    cr_expect_eq(PQtransactionStatus(conn), PQTRANS_INTRANS,
                 "invalid/%s (%s): the caller's transaction is no longer usable", c->name, how);
    outbox_event_free(ev);
}

static void
expect_sql_refusal(const struct envelope_case *c)
{
    PGresult *res;
    char *id = sql_writer(c, &res);
    const char *message = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);

    cr_expect_null(id, "invalid/%s (SQL): accepted as %s", c->name, id);
    cr_expect_eq(PQresultStatus(res), PGRES_FATAL_ERROR, "invalid/%s (SQL): %s", c->name,
                 PQresStatus(PQresultStatus(res)));
    cr_expect(message != NULL && strstr(message, c->expected_sql_error) != NULL,
              "invalid/%s (SQL): message \"%s\" lacks \"%s\"", c->name,
              message ? message : "(none)", c->expected_sql_error);
    free(id);
    PQclear(res);
}

Test(enqueue_cases, every_invalid_case_is_refused_by_both_writers_with_its_message)
{
    struct envelope_case *cases;
    size_t count = envelope_cases_load("invalid", &cases);

    cr_assert_gt(count, 10, "too few invalid cases found");
    /* All C refusals in one transaction: each must leave it usable for the next. */
    harness_exec(conn, "BEGIN");
    for (size_t i = 0; i < count; i++) {
        cr_assert_not_null(cases[i].expected_error, "invalid/%s has no .error file", cases[i].name);
        expect_c_refusal(&cases[i], 0);
        expect_c_refusal(&cases[i], 1);
    }
    harness_exec(conn, "COMMIT");
    for (size_t i = 0; i < count; i++) {
        expect_sql_refusal(&cases[i]);
    }
    cr_expect_eq(event_count(), 0, "a refused case left a row");
    envelope_cases_free(cases, count);
}

/* ---- the SQL function's other call forms --------------------------------------------- */

static const char aggregate_id[] = "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b";

/* Runs `sql` (one row, one column: the new id) and returns the stored row's fields. */
static PGresult *
enqueue_and_fetch(const char *sql, int n, const char *const *params)
{
    PGresult *res = PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
    const char *id_param[1];
    PGresult *row;

    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s: %s", sql, PQresultErrorMessage(res));
    id_param[0] = PQgetvalue(res, 0, 0);
    row = PQexecParams(conn,
                       "SELECT aggregate_type, aggregate_id::text, event_type, tenant_id, "
                       "data_subject, envelope ->> 'traceparent', envelope -> 'payload', "
                       "envelope ->> 'aggregate_id' "
                       "FROM outbox.events WHERE id = $1::uuid",
                       1, NULL, id_param, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(row), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(row));
    cr_assert_eq(PQntuples(row), 1, "the returned id %s has no row", id_param[0]);
    PQclear(res);
    return row;
}

Test(enqueue_cases, the_uuid_overload_takes_a_uuid_aggregate_id)
{
    const char *params[] = {"movie", "0190A3B2-1C2D-7E3F-8A9B-0C1D2E3F4A5B", "review.logged",
                            "{\"stars\": 5}"};
    PGresult *row =
        enqueue_and_fetch("SELECT outbox.enqueue($1, $2::uuid, $3, $4::jsonb)", 4, params);
    PGresult *res;

    cr_expect_str_eq(PQgetvalue(row, 0, 1), aggregate_id);
    cr_expect_str_eq(PQgetvalue(row, 0, 7), aggregate_id, "envelope aggregate_id not canonical");
    cr_expect_str_eq(PQgetvalue(row, 0, 6), "{\"stars\": 5}");
    PQclear(row);

    /* It validates like the text form. */
    res = PQexec(conn, "SELECT outbox.enqueue('movie', gen_random_uuid(), 'movie.logged', '{}')");
    cr_expect_eq(PQresultStatus(res), PGRES_FATAL_ERROR);
    cr_expect(strstr(PQresultErrorMessage(res), "must not start with aggregate_type") != NULL, "%s",
              PQresultErrorMessage(res));
    PQclear(res);
    cr_expect_eq(event_count(), 1);
}

Test(enqueue_cases, named_arguments_work_in_any_order)
{
    const char *params[] = {
        "{\"stars\": 4}", "review.logged",
        aggregate_id,     "movie",
        "acct-9",         "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"};
    PGresult *row = enqueue_and_fetch(
        "SELECT outbox.enqueue(payload => $1::jsonb, event_type => $2, aggregate_id => $3, "
        "aggregate_type => $4, data_subject => $5, traceparent => $6)",
        6, params);

    cr_expect_str_eq(PQgetvalue(row, 0, 0), "movie");
    cr_expect_str_eq(PQgetvalue(row, 0, 1), aggregate_id);
    cr_expect_str_eq(PQgetvalue(row, 0, 2), "review.logged");
    cr_expect(PQgetisnull(row, 0, 3), "tenant_id was set");
    cr_expect_str_eq(PQgetvalue(row, 0, 4), "acct-9");
    cr_expect_str_eq(PQgetvalue(row, 0, 5), params[5]);
    cr_expect_str_eq(PQgetvalue(row, 0, 6), "{\"stars\": 4}");
    PQclear(row);

    /* With a uuid aggregate id, named arguments pick the uuid overload. */
    row = enqueue_and_fetch("SELECT outbox.enqueue(aggregate_type => 'movie', event_type => "
                            "'review.logged', tenant_id => 'acme', aggregate_id => $1::uuid, "
                            "payload => '{}')",
                            1, (const char *[]){aggregate_id});
    cr_expect_str_eq(PQgetvalue(row, 0, 1), aggregate_id);
    cr_expect_str_eq(PQgetvalue(row, 0, 3), "acme");
    PQclear(row);
    cr_expect_eq(event_count(), 2);
}

/*
 * The C writer and the relay read JSON numbers as doubles, so a number
 * that rounds to infinity must be refused by the SQL writer too: else the
 * relay would quarantine an event outbox.enqueue() accepted.
 */
Test(enqueue_cases, a_number_beyond_the_range_of_a_double_is_refused_by_both_writers)
{
    /* 2^1024 - 2^970 is the smallest magnitude that rounds to infinity. */
    static const char overflow_at[] =
        "17976931348623158079372897140530341507993413271003782693617377898044496829276475094664"
        "90179775872070963302864166928879109465555478519404026306574886715058206819089020007083"
        "83676273854845817711531764475730270069855571366959622842914819860834936475292719074168"
        "444365510704342711559699508093042880177904174497792";
    char refused[4][400], accepted[3][400];
    size_t n_refused = 0, n_accepted = 0;

    snprintf(refused[n_refused++], sizeof(refused[0]), "{\"x\": 1e400}");
    snprintf(refused[n_refused++], sizeof(refused[0]), "{\"a\": [1, {\"b\": -1e309}]}");
    snprintf(refused[n_refused++], sizeof(refused[0]), "{\"x\": %s}", overflow_at);
    snprintf(refused[n_refused++], sizeof(refused[0]), "{\"x\": [-%s]}", overflow_at);
    snprintf(accepted[n_accepted++], sizeof(accepted[0]), "{\"x\": 1.7976931348623157e308}");
    snprintf(accepted[n_accepted++], sizeof(accepted[0]), "{\"x\": 1e-400}");
    /* One below the boundary (its last digit is 2) rounds down to the largest double. */
    snprintf(accepted[n_accepted++], sizeof(accepted[0]), "{\"x\": %.*s1}",
             (int)strlen(overflow_at) - 1, overflow_at);

    for (size_t i = 0; i < n_refused + n_accepted; i++) {
        int want_ok = i >= n_refused;
        const char *payload = want_ok ? accepted[i - n_refused] : refused[i];
        struct envelope_case c = {
            .name = (char *)"number",
            .aggregate_type = (char *)"movie",
            .aggregate_id = (char *)aggregate_id,
            .event_type = (char *)"review.logged",
            .payload_text = (char *)payload,
            .payload_len = strlen(payload),
        };
        outbox_error err = {0};
        outbox_event *ev;
        PGresult *res;
        char *id;

        harness_exec(conn, "BEGIN");
        ev = c_writer(&c, 0, &err);
        harness_exec(conn, "COMMIT");
        id = sql_writer(&c, &res);
        if (want_ok) {
            cr_expect_not_null(ev, "C writer refused %.60s: %s", payload, err.message);
            cr_expect_not_null(id, "SQL writer refused %.60s: %s", payload,
                               PQresultErrorMessage(res));
        } else {
            cr_expect_null(ev, "C writer accepted %.60s", payload);
            cr_expect(strstr(err.message, "real number overflow") != NULL, "%s", err.message);
            cr_expect_null(id, "SQL writer accepted %.60s", payload);
            cr_expect(strstr(PQresultErrorMessage(res), "real number overflow") != NULL, "%s",
                      PQresultErrorMessage(res));
        }
        if (ev != NULL && id != NULL) {
            expect_same_envelope("number", "C (text)", outbox_event_id(ev), id);
        }
        PQclear(res);
        free(id);
        outbox_event_free(ev);
    }
    cr_expect_eq(event_count(), 2 * (long long)n_accepted);
}

/* ---- the set-based SQL writer, outbox.enqueue_many(jsonb), through the same cases ----- */

static const char sql_enqueue_many[] = "SELECT outbox.enqueue_many($1::jsonb)";

/* Appends `value` to `out` as a JSON string (raw when it is not UTF-8: the server refuses). */
static void
put_json_string(FILE *out, const char *value)
{
    json_t *s = json_string(value);
    char *text = s != NULL ? json_dumps(s, JSON_ENCODE_ANY) : NULL;

    if (text != NULL) {
        fputs(text, out);
    } else {
        fprintf(out, "\"%s\"", value);
    }
    free(text);
    json_decref(s);
}

/* Appends the case's event as one element of enqueue_many()'s array: absent fields left out. */
static void
put_element(FILE *out, const struct envelope_case *c)
{
    const char *names[] = {"aggregate_type", "aggregate_id", "event_type",
                           "tenant_id",      "data_subject", "traceparent"};
    const char *values[] = {c->aggregate_type, c->aggregate_id, c->event_type,
                            c->tenant_id,      c->data_subject, c->traceparent};
    int first = 1;

    fputc('{', out);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (values[i] != NULL) {
            fprintf(out, "%s\"%s\": ", first ? "" : ", ", names[i]);
            put_json_string(out, values[i]);
            first = 0;
        }
    }
    if (c->payload_text != NULL) {
        fprintf(out, "%s\"payload\": ", first ? "" : ", ");
        fwrite(c->payload_text, 1, c->payload_len, out);
    }
    fputc('}', out);
}

/* Runs enqueue_many() over the array `elements` (its text); returns the result. */
static PGresult *
many_writer(const char *elements)
{
    const char *params[1] = {elements};

    return PQexecParams(conn, sql_enqueue_many, 1, NULL, params, NULL, NULL, 0);
}

/* The ids of a uuid[] in text form ("{a,b}"), each 36 characters: `*out` (caller frees). */
static size_t
split_ids(const char *array_text, char (**out)[37])
{
    size_t n = 0, len = strlen(array_text);
    char(*ids)[37] = calloc(len / 37 + 1, 37);

    for (const char *p = array_text + 1; *p != '\0' && *p != '}'; p += 37) {
        memcpy(ids[n], p, 36);
        ids[n++][36] = '\0';
    }
    *out = ids;
    return n;
}

Test(enqueue_cases, every_valid_case_is_stored_by_enqueue_many_as_by_enqueue)
{
    struct envelope_case *cases;
    size_t count = envelope_cases_load("valid", &cases);
    char *text = NULL, (*ids)[37] = NULL;
    size_t text_len = 0, n;
    FILE *arr = open_memstream(&text, &text_len);
    PGresult *res;

    cr_assert_gt(count, 10, "too few valid cases found");
    fputc('[', arr);
    for (size_t i = 0; i < count; i++) {
        fputs(i > 0 ? ", " : "", arr);
        put_element(arr, &cases[i]);
    }
    fputc(']', arr);
    fclose(arr);

    /* All of them in one call: one id per element, in the array's order. */
    res = many_writer(text);
    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(res));
    n = split_ids(PQgetvalue(res, 0, 0), &ids);
    cr_assert_eq(n, count, "%zu ids for %zu events: %s", n, count, PQgetvalue(res, 0, 0));
    PQclear(res);
    for (size_t i = 0; i < count; i++) {
        char *sql_id = sql_writer(&cases[i], &res);

        cr_expect_not_null(sql_id, "valid/%s (SQL): %s", cases[i].name, PQresultErrorMessage(res));
        PQclear(res);
        if (sql_id != NULL) {
            expect_same_envelope(cases[i].name, "enqueue_many", ids[i], sql_id);
        }
        if (i > 0) {
            cr_expect(strcmp(ids[i - 1], ids[i]) < 0, "ids do not ascend: %s then %s", ids[i - 1],
                      ids[i]);
        }
        free(sql_id);
    }
    cr_expect_eq(event_count(), (long long)count * 2);
    free(ids);
    free(text);
    envelope_cases_free(cases, count);
}

/* Refused as element 2 of [good, good, bad], nothing stored. */
static void
expect_many_refusal(const struct envelope_case *good, const struct envelope_case *c)
{
    char *text = NULL;
    size_t text_len = 0;
    FILE *arr = open_memstream(&text, &text_len);
    PGresult *res;
    const char *message;
    /* A .sql.error file: PostgreSQL's jsonb input refuses the whole array, before any index. */
    int refused_by_input = strcmp(c->expected_sql_error, c->expected_error) != 0;

    fputc('[', arr);
    put_element(arr, good);
    fputs(", ", arr);
    put_element(arr, good);
    fputs(", ", arr);
    put_element(arr, c);
    fputc(']', arr);
    fclose(arr);
    res = many_writer(text);
    message = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    cr_expect_eq(PQresultStatus(res), PGRES_FATAL_ERROR, "invalid/%s (enqueue_many): %s", c->name,
                 PQresStatus(PQresultStatus(res)));
    cr_expect(message != NULL && strstr(message, c->expected_sql_error) != NULL,
              "invalid/%s (enqueue_many): message \"%s\" lacks \"%s\"", c->name,
              message ? message : "(none)", c->expected_sql_error);
    if (!refused_by_input) {
        cr_expect(message != NULL && strncmp(message, "events[2]: ", 11) == 0,
                  "invalid/%s (enqueue_many): message \"%s\" does not name events[2]", c->name,
                  message ? message : "(none)");
        cr_expect_str_eq(PQresultErrorField(res, PG_DIAG_SQLSTATE), "22023", "invalid/%s", c->name);
    }
    PQclear(res);
    free(text);
}

Test(enqueue_cases, every_invalid_case_is_refused_by_enqueue_many_naming_its_index)
{
    struct envelope_case *cases, *valid;
    size_t count = envelope_cases_load("invalid", &cases);
    size_t valid_count = envelope_cases_load("valid", &valid);

    cr_assert_gt(count, 10, "too few invalid cases found");
    cr_assert_gt(valid_count, 0);
    for (size_t i = 0; i < count; i++) {
        expect_many_refusal(&valid[0], &cases[i]);
    }
    cr_expect_eq(event_count(), 0, "a refused batch left a row");
    envelope_cases_free(valid, valid_count);
    envelope_cases_free(cases, count);
}
