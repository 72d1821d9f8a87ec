/* SPDX-License-Identifier: MIT */
/*
 * test_event_time.c - a hand-written row's occurred_at must name a real
 * instant. The digits' pattern is not enough: 2026-02-30, hour 24, month
 * 13 or an offset of +99:99 are refused by the row rule with SQLSTATE
 * 23514, the rule events_envelope_v1 and the value in the message, so they
 * are never published as ce-time. Real times at every edge (Feb 29 of a
 * leap year, 23:59:59, offsets of 23:59) commit. The table's check
 * (outbox.time_is_real()) and the relay's (obx_check_timestamp_field())
 * agree on every time of a sweep across the edges.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "envelope/fields.h"
#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

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

TestSuite(event_time, .init = setup, .fini = teardown, .timeout = 60);

/* Inserts a row by hand, as a foreign writer would, with `occurred_at`; the result. */
static PGresult *
insert_with_time(const char *occurred_at)
{
    const char *params[1] = {occurred_at};

    return PQexecParams(
        conn,
        "INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, envelope) "
        "SELECT id, 'movie', '0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', 'review.logged', "
        "jsonb_build_object('id', id, 'event_type', 'review.logged', 'aggregate_type', 'movie', "
        "'aggregate_id', '0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', 'occurred_at', $1::text, "
        "'schema_version', 1, 'payload', '{}'::jsonb) "
        "FROM (SELECT outbox.uuid_v7() AS id) AS g",
        1, NULL, params, NULL, NULL, 0);
}

static void
expect_refused(const char *occurred_at)
{
    PGresult *res = insert_with_time(occurred_at);
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *rule = PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME);
    const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);

    cr_expect_eq(PQresultStatus(res), PGRES_FATAL_ERROR, "occurred_at %s committed", occurred_at);
    cr_expect_str_eq(state ? state : "", "23514", "%s: %s", occurred_at, PQresultErrorMessage(res));
    cr_expect_str_eq(rule ? rule : "", "events_envelope_v1", "%s: %s", occurred_at,
                     PQresultErrorMessage(res));
    cr_expect(detail != NULL && strstr(detail, occurred_at) != NULL &&
                  strstr(detail, "is not a real date and time") != NULL,
              "%s: the detail should quote the value: %s", occurred_at, detail ? detail : "");
    PQclear(res);
}

static void
expect_taken(const char *occurred_at)
{
    PGresult *res = insert_with_time(occurred_at);

    cr_expect_eq(PQresultStatus(res), PGRES_COMMAND_OK, "%s: %s", occurred_at,
                 PQresultErrorMessage(res));
    PQclear(res);
}

Test(event_time, a_hand_written_row_with_an_impossible_time_does_not_commit)
{
    expect_refused("2026-02-30T10:00:00Z");
    expect_refused("2026-02-10T24:00:00Z");
    expect_refused("2026-13-10T10:00:00Z");
    expect_refused("2026-02-10T10:00:00+99:99");
    expect_refused("2026-02-29T10:00:00Z");
    expect_refused("2100-02-29T10:00:00Z");
    expect_refused("2026-04-31T10:00:00.123Z");
    expect_refused("2026-00-10T10:00:00Z");
    expect_refused("2026-01-00T10:00:00Z");
    expect_refused("2026-01-10T10:60:00Z");
    expect_refused("2016-12-31T23:59:60Z");
    expect_refused("2026-01-10T10:00:00-24:00");
    expect_refused("2026-01-10T10:00:00+05:60");
    cr_expect_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.events"), 0);
}

Test(event_time, real_times_at_every_edge_commit)
{
    expect_taken("2024-02-29T23:59:59.999999999Z");
    expect_taken("2000-02-29T00:00:00+23:59");
    expect_taken("2026-12-31T23:59:59-23:59");
    expect_taken("2026-04-30T00:00:00.5+00:00");
    expect_taken("0001-01-01T00:00:00Z");
    expect_taken("9999-12-31T23:59:59Z");
    cr_expect_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.events"), 6);
}

/* Appends `t` to the text[] literal in `arr`. */
static void
add_time(struct obx_buf *arr, const char *t)
{
    obx_buf_appendf(arr, "%s%s", arr->len > 1 ? "," : "", t);
}

Test(event_time, the_table_and_the_relay_agree_on_every_time_of_a_sweep)
{
    static const char *const years[] = {"1900", "2000", "2023", "2024", "2100"};
    static const char *const zones[] = {"Z",      "+00:00", "+23:59", "-23:59", "+24:00",
                                        "-00:60", "+99:99", ".5Z",    ".Z",     "z"};
    struct obx_buf arr;
    PGresult *res;
    const char *params[1];
    char t[64];
    int disagree = 0;

    obx_buf_init(&arr);
    obx_buf_append(&arr, "{", 1);
    for (size_t y = 0; y < sizeof(years) / sizeof(years[0]); y++) {
        for (int month = 0; month <= 13; month++) {
            for (int day = 0; day <= 32; day++) {
                snprintf(t, sizeof(t), "%s-%02d-%02dT12:00:00Z", years[y], month, day);
                add_time(&arr, t);
            }
        }
    }
    for (int hms = 0; hms <= 61; hms++) {
        snprintf(t, sizeof(t), "2026-06-15T%02d:%02d:%02dZ", hms % 26, hms, 61 - hms);
        add_time(&arr, t);
    }
    for (size_t z = 0; z < sizeof(zones) / sizeof(zones[0]); z++) {
        snprintf(t, sizeof(t), "2026-06-15T12:00:00%s", zones[z]);
        add_time(&arr, t);
    }
    obx_buf_append(&arr, "}", 1);
    cr_assert_not_null(arr.data);
    params[0] = arr.data;
    res = PQexecParams(conn, "SELECT t, outbox.time_is_real(t) FROM unnest($1::text[]) AS t", 1,
                       NULL, params, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(res));
    cr_assert_gt(PQntuples(res), 2000);
    for (int i = 0; i < PQntuples(res); i++) {
        const char *time = PQgetvalue(res, i, 0);
        int sql_real = strcmp(PQgetvalue(res, i, 1), "t") == 0;
        int c_real = obx_check_timestamp_field("occurred_at", time, NULL) == OUTBOX_OK;

        if (sql_real != c_real) {
            cr_log_error("%s: the table says %s, the relay %s", time, sql_real ? "real" : "not",
                         c_real ? "real" : "not");
            disagree++;
        }
    }
    cr_expect_eq(disagree, 0, "%d times judged differently", disagree);
    PQclear(res);
    obx_buf_fini(&arr);
}
