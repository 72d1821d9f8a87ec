/* SPDX-License-Identifier: MIT */
/*
 * test_ordering.c - `outboxctl ordering on|off|status` switches the
 * schema's per-aggregate numbering in the database and reports it (text
 * and --json), refuses what it does not know (exit 2), gives up with exit 1
 * behind a writer's open transaction instead of holding writers back, and
 * `outboxctl doctor` checks ordering's parts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "ctl_test.h"
#include "harness.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;
static struct relay_env env;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    relay_test_prepare(conn);
    relay_test_env(&env, "ORD", "ord");
}

static void
teardown(void)
{
    relay_env_fini(&env);
    PQfinish(conn);
    conn = NULL;
}

TestSuite(ctl_ordering, .init = setup, .fini = teardown, .timeout = 120);

static json_t *
status_json(struct ctl_run *r)
{
    ctl_expect(r, &env, 0, (const char *const[]){"ordering", "status", "--json", NULL});
    cr_assert_eq(json_array_size(r->lines), 1, "status --json prints one object:\n%s", r->out);
    return json_array_get(r->lines, 0);
}

Test(ctl_ordering, on_off_and_status_switch_and_report_the_schemas_numbering)
{
    struct ctl_run r;
    json_t *doc;

    doc = status_json(&r);
    cr_expect(json_is_false(json_object_get(doc, "ordering")), "%s", r.out);
    cr_expect_str_eq(ctl_str(doc, "schema"), "outbox");
    ctl_run_fini(&r);

    ctl_expect(&r, &env, 0, (const char *const[]){"ordering", "on", NULL});
    cr_expect(strstr(r.out, "ordering is on") != NULL, "%s", r.out);
    ctl_run_fini(&r);
    cr_expect_eq(harness_scalar_ll(conn, "SELECT outbox.ordering_on()::int"), 1);
    ctl_expect(&r, &env, 0, (const char *const[]){"ordering", "on", NULL});
    cr_expect(strstr(r.out, "already on") != NULL, "%s", r.out);
    ctl_run_fini(&r);

    harness_exec(conn, "SELECT outbox.enqueue('order', '0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', "
                       "'x', '{}') FROM generate_series(1, 3)");
    harness_exec(conn, "SELECT outbox.enqueue('order', '00000000-0000-0000-0000-000000000000', "
                       "'x', '{}')");
    doc = status_json(&r);
    cr_expect(json_is_true(json_object_get(doc, "ordering")), "%s", r.out);
    cr_expect_eq(ctl_int(doc, "aggregates"), 1, "%s", r.out);
    cr_expect_eq(ctl_int(doc, "highest_seq"), 3, "%s", r.out);
    cr_expect_eq(ctl_int(doc, "waiting_ordered"), 3, "%s", r.out);
    cr_expect_eq(ctl_int(doc, "waiting_unordered"), 1, "%s", r.out);
    ctl_run_fini(&r);

    ctl_expect(&r, &env, 0, (const char *const[]){"ordering", "off", "--json", NULL});
    cr_assert_eq(json_array_size(r.lines), 1, "%s", r.out);
    cr_expect(json_is_false(json_object_get(json_array_get(r.lines, 0), "ordering")));
    cr_expect(json_is_true(json_object_get(json_array_get(r.lines, 0), "was")));
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 0, (const char *const[]){"ordering", "status", NULL});
    cr_expect(strstr(r.out, "ordering is off") != NULL, "%s", r.out);
    cr_expect(strstr(r.out, "3 ordered, 1 unordered") != NULL, "%s", r.out);
    ctl_run_fini(&r);
}

Test(ctl_ordering, refuses_what_it_does_not_know)
{
    struct ctl_run r;

    ctl_expect(&r, &env, 2, (const char *const[]){"ordering", NULL});
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 2, (const char *const[]){"ordering", "maybe", NULL});
    cr_expect(strstr(r.out, "\"maybe\" is not on, off or status") != NULL, "%s", r.out);
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 2, (const char *const[]){"ordering", "on", "--all", NULL});
    ctl_run_fini(&r);
}

Test(ctl_ordering, gives_up_behind_an_open_writer_instead_of_holding_writers_back)
{
    PGconn *writer = PQconnectdb(harness_db_url());
    struct ctl_run r;

    cr_assert_eq(PQstatus(writer), CONNECTION_OK);
    harness_exec(writer, "BEGIN");
    harness_exec(writer, "SELECT outbox.enqueue('order', '0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', "
                         "'x', '{}')");
    ctl_expect(&r, &env, 1, (const char *const[]){"ordering", "on", NULL});
    cr_expect(strstr(r.out, "still open after 3 s") != NULL, "%s", r.out);
    cr_expect(strstr(r.out, "55P03") != NULL, "%s", r.out);
    ctl_run_fini(&r);
    harness_exec(writer, "COMMIT");
    PQfinish(writer);
    cr_expect_eq(harness_scalar_ll(conn, "SELECT outbox.ordering_on()::int"), 0);
    ctl_expect(&r, &env, 0, (const char *const[]){"ordering", "on", NULL});
    ctl_run_fini(&r);
}

/*
 * The level of doctor's ordering finding, and what it saw (in `saw`, `cap` bytes).
 * Its exit code is not asserted: this test makes no stream, which doctor reports.
 */
static const char *
doctor_ordering(struct ctl_run *r, char *saw, size_t cap)
{
    size_t i;
    json_t *line;

    ctl_run(r, &env, (const char *const[]){"doctor", "--json", NULL});
    json_array_foreach(r->lines, i, line)
    {
        const char *c = ctl_str(line, "check");

        if (c != NULL && strcmp(c, "ordering") == 0) {
            snprintf(saw, cap, "%s", ctl_str(line, "saw"));
            return ctl_str(line, "level");
        }
    }
    cr_assert_fail("doctor has no ordering finding:\n%s", r->out);
    return NULL;
}

Test(ctl_ordering, doctor_checks_the_trigger_and_the_counters)
{
    struct ctl_run r;
    char saw[512];

    cr_expect_str_eq(doctor_ordering(&r, saw, sizeof(saw)), "ok");
    cr_expect(strstr(saw, "ordering is off") != NULL, "%s", saw);
    ctl_run_fini(&r);
    harness_exec(conn, "SELECT outbox.set_ordering(true)");
    cr_expect_str_eq(doctor_ordering(&r, saw, sizeof(saw)), "ok");
    cr_expect(strstr(saw, "ordering is on") != NULL, "%s", saw);
    ctl_run_fini(&r);
    /* Enabled the plain way: a session in replica mode would write unnumbered. */
    harness_exec(conn, "ALTER TABLE outbox.events ENABLE TRIGGER events_seq");
    cr_expect_str_eq(doctor_ordering(&r, saw, sizeof(saw)), "warn");
    cr_expect(strstr(saw, "only in origin sessions") != NULL, "%s", saw);
    ctl_run_fini(&r);
    harness_exec(conn, "DROP TRIGGER events_seq ON outbox.events");
    cr_expect_str_eq(doctor_ordering(&r, saw, sizeof(saw)), "error");
    cr_expect(strstr(saw, "trigger events_seq missing") != NULL, "%s", saw);
    ctl_run_fini(&r);
}

Test(ctl_ordering, dead_requeue_writes_a_pruned_ordered_row_back_with_its_number)
{
    struct ctl_run r;

    harness_exec(conn, "SELECT outbox.set_ordering(true)");
    harness_exec(conn, "SELECT outbox.enqueue('order', '0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', "
                       "'x', '{}') FROM generate_series(1, 2)");
    /* The relay dead-lettered number 2, and retention pruned its row. */
    harness_exec(conn, "INSERT INTO outbox.dead_letters (event_id, handler, envelope, reason) "
                       "SELECT id, '', envelope, 'rejected' FROM outbox.events "
                       "WHERE aggregate_seq = 2");
    harness_exec(conn, "DELETE FROM outbox.events WHERE aggregate_seq = 2");
    ctl_expect(&r, &env, 0, (const char *const[]){"dead", "requeue", "--relay", NULL});
    ctl_run_fini(&r);
    cr_expect_eq(harness_scalar_ll(conn,
                                   "SELECT count(*) FROM outbox.events WHERE "
                                   "aggregate_seq = 2 AND envelope ->> 'aggregate_seq' = '2'"),
                 1, "the row is back with its own number");
    cr_expect_eq(harness_scalar_ll(conn, "SELECT last_seq FROM outbox.aggregate_heads"), 2,
                 "and no new number was given");
}

/* The relay's dead letter of an event of aggregate `agg`, as a relay leaves one. */
static char *
dead_head(const char *agg)
{
    char sql[512], *id;

    snprintf(sql, sizeof(sql), "SELECT outbox.enqueue('order', '%s', 'changed', '{\"n\":1}')::text",
             agg);
    id = harness_scalar_text(conn, sql);
    snprintf(sql, sizeof(sql),
             "WITH d AS (UPDATE outbox.events SET status = 'dead', next_attempt_at = 'infinity', "
             "attempts = 5, last_error = 'nak' WHERE id = '%s' RETURNING id, envelope) "
             "INSERT INTO outbox.dead_letters (event_id, handler, envelope, reason, attempts) "
             "SELECT id, '', envelope, 'nak', 5 FROM d",
             id);
    harness_exec(conn, sql);
    return id;
}

Test(ctl_ordering, dead_skip_lets_the_events_behind_a_dead_head_go_on_and_is_never_requeued)
{
    static const char agg[] = "33333333-3333-4333-8333-333333333333";
    struct ctl_run r;
    char *head, *second, sql[256];
    json_t *row;

    ctl_expect(&r, &env, 0, (const char *const[]){"ordering", "on", NULL});
    ctl_run_fini(&r);
    head = dead_head(agg);
    snprintf(sql, sizeof(sql), "SELECT outbox.enqueue('order', '%s', 'changed', '{\"n\":2}')::text",
             agg);
    second = harness_scalar_text(conn, sql);
    /* The number behind it waits, as a relay's claim leaves it. */
    harness_exec(conn, "UPDATE outbox.events SET next_attempt_at = now() + interval '1 hour', "
                       "last_error = 'waiting_for_head' WHERE aggregate_seq = 2");

    ctl_expect(&r, &env, 0, (const char *const[]){"status", "--json", NULL});
    row = json_array_get(json_object_get(json_array_get(r.lines, 0), "blocked_aggregates"), 0);
    cr_assert_not_null(row, "status lists the held aggregate: %s", r.out);
    cr_expect_str_eq(json_string_value(json_object_get(row, "handler")), "", "%s", r.out);
    cr_expect_str_eq(json_string_value(json_object_get(row, "aggregate_id")), agg, "%s", r.out);
    cr_expect_str_eq(json_string_value(json_object_get(row, "head_event_id")), head, "%s", r.out);
    cr_expect_str_eq(json_string_value(json_object_get(row, "head_status")), "dead", "%s", r.out);
    cr_expect_str_eq(json_string_value(json_object_get(row, "reason")), "nak", "%s", r.out);
    cr_expect_eq(json_integer_value(json_object_get(row, "waiting")), 1, "%s", r.out);
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 0, (const char *const[]){"status", NULL});
    cr_expect(strstr(r.out, "blocked aggregates         1") != NULL &&
                  strstr(r.out, "(relay)    order 33333333-3333-4333-8333-333333333333 at seq 1") !=
                      NULL,
              "%s", r.out);
    ctl_run_fini(&r);

    ctl_expect(&r, &env, 0, (const char *const[]){"trace", second, "--json", NULL});
    row = json_array_get(r.lines, 0);
    cr_expect_eq(json_integer_value(json_object_get(row, "aggregate_seq")), 2, "%s", r.out);
    cr_expect_str_eq(json_string_value(json_object_get(row, "waits_for")), head,
                     "trace says which event it waits for: %s", r.out);
    cr_expect_str_eq(json_string_value(json_object_get(row, "waits_for_status")), "dead", "%s",
                     r.out);
    ctl_run_fini(&r);

    ctl_expect(&r, &env, 2, (const char *const[]){"dead", "skip", NULL});
    cr_expect(strstr(r.out, "--all") != NULL, "a skip of everything needs --all: %s", r.out);
    ctl_run_fini(&r);

    ctl_expect(&r, &env, 0,
               (const char *const[]){"dead", "skip", "--id", head, "--dry-run", "--json", NULL});
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.aggregate_skips"), 0,
                 "a dry run changes nothing");
    ctl_run_fini(&r);

    ctl_expect(&r, &env, 0, (const char *const[]){"dead", "skip", "--id", head, "--json", NULL});
    row = json_array_get(r.lines, 0);
    cr_assert_str_eq(json_string_value(json_object_get(row, "kind")), "skipped", "%s", r.out);
    cr_expect_eq(json_integer_value(json_object_get(row, "aggregate_seq")), 1, "%s", r.out);
    cr_expect_eq(json_integer_value(json_object_get(row, "woken")), 1, "%s", r.out);
    ctl_run_fini(&r);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.aggregate_skips "
                                         "WHERE aggregate_seq = 1 AND handler = ''"),
                 1);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.events "
                                         "WHERE aggregate_seq = 2 AND next_attempt_at <= now()"),
                 1, "the event behind it is due at once");

    ctl_expect(&r, &env, 0, (const char *const[]){"dead", "list", "--json", NULL});
    cr_expect(json_is_true(json_object_get(json_array_get(r.lines, 0), "skipped")), "%s", r.out);
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 0, (const char *const[]){"dead", "requeue", "--id", head, NULL});
    ctl_run_fini(&r);
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM outbox.events WHERE id = '%s' "
             "AND status = 'dead'",
             head);
    cr_assert_eq(harness_scalar_ll(conn, sql), 1, "a skipped event is not requeued");
    ctl_expect(&r, &env, 0, (const char *const[]){"trace", second, "--json", NULL});
    cr_expect(json_is_null(json_object_get(json_array_get(r.lines, 0), "waits_for")),
              "a skipped predecessor is waited for no more: %s", r.out);
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 0, (const char *const[]){"status", "--json", NULL});
    cr_expect_eq(json_array_size(json_object_get(json_array_get(r.lines, 0), "blocked_aggregates")),
                 0, "a skipped head holds nothing: %s", r.out);
    ctl_run_fini(&r);
    free(head);
    free(second);
}

Test(ctl_ordering, doctor_warns_of_held_aggregates_and_a_missing_head_index)
{
    struct ctl_run r;
    char saw[512], *head;

    harness_exec(conn, "SELECT outbox.set_ordering(true)");
    head = dead_head("44444444-4444-4444-8444-444444444444");
    cr_expect_str_eq(doctor_ordering(&r, saw, sizeof(saw)), "warn");
    cr_expect(strstr(saw, "1 ordered aggregate of outbox held by a dead") != NULL, "%s", saw);
    ctl_run_fini(&r);
    harness_exec(conn, "DROP INDEX outbox.events_aggregate_seq_idx");
    cr_expect_str_eq(doctor_ordering(&r, saw, sizeof(saw)), "error");
    cr_expect(strstr(saw, "events_aggregate_seq_idx is missing") != NULL, "%s", saw);
    ctl_run_fini(&r);
    free(head);
}
