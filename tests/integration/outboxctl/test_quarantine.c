/* SPDX-License-Identifier: MIT */
/*
 * test_quarantine.c - `outboxctl quarantine list|release|purge`: the rows
 * the relay quarantined are listed with their reasons (text and --json,
 * filters narrow it, exit 1 while there are any); a row repaired by an
 * UPDATE of its envelope is released, made pending and published by the
 * running relay, while a row that still fails the relay's check keeps its
 * status and its reason is printed again (exit 1); purge deletes only the
 * rows its filter chooses, nothing with --dry-run, and like release it
 * refuses to run without a filter or --all. skip records a quarantined
 * head of an ordered aggregate as a gap: the events behind it go out, and
 * the row stays quarantined; purge refuses such a head until it is
 * skipped, and purges the unordered rows beside it. status and validate point to the verb. The
 * bad rows are written past the table's rules the way
 * docs/writing-events.md describes (outbox.rows_validated set by hand).
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

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    relay_test_prepare(conn);
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(ctl_quarantine, .init = setup, .fini = teardown, .timeout = 200);

/*
 * A row of `event_type` whose envelope is `envelope_sql` (may use id and
 * agg), committed past the row trigger; its id, malloc'd.
 */
static char *
insert_bad(const char *event_type, const char *envelope_sql)
{
    char sql[1024];
    char *id;

    harness_exec(conn, "BEGIN");
    harness_exec(conn, "SELECT set_config('outbox.rows_validated', 'on', true)");
    snprintf(sql, sizeof(sql),
             "WITH v AS (SELECT outbox.uuid_v7() AS id, gen_random_uuid() AS agg) "
             "INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, envelope) "
             "SELECT id, 'movie', agg, '%s', %s FROM v RETURNING id::text",
             event_type, envelope_sql);
    id = harness_scalar_text(conn, sql);
    harness_exec(conn, "COMMIT");
    return id;
}

/* The v1 envelope of the row, less `without` (a key) and with `extra` (a jsonb) merged in. */
#define ENVELOPE(event_type, without, extra)                                           \
    "(jsonb_build_object('id', id, 'event_type', '" event_type "', 'aggregate_type', " \
    "'movie', 'aggregate_id', agg, 'occurred_at', '2026-11-29T09:41:56.123Z', "        \
    "'schema_version', 1, 'payload', '{}'::jsonb) - '" without "') || '" extra "'::jsonb"

static long long
status_of(const char *id, const char *status)
{
    char where[160];

    snprintf(where, sizeof(where), "id = '%s' AND status = '%s'", id, status);
    return relay_test_count(conn, where);
}

/* The quarantined line of `id` in `r`, or NULL. */
static json_t *
line_of(const struct ctl_run *r, const char *kind, const char *id)
{
    for (size_t i = 0; i < ctl_count(r, kind); i++) {
        json_t *line = ctl_line(r, kind, i);

        if (strcmp(ctl_str(line, "id"), id) == 0) {
            return line;
        }
    }
    return NULL;
}

Test(ctl_quarantine, lists_releases_repaired_rows_and_purges_by_filter)
{
    struct relay_env env;
    struct harness_proc relay;
    struct ctl_run r;
    char *repairable, *wrong_id, *other, sql[256];
    json_t *line;

    relay_test_enqueue(conn, 5);
    repairable = insert_bad("review.logged", ENVELOPE("review.logged", "occurred_at", "{}"));
    wrong_id =
        insert_bad("review.logged", ENVELOPE("review.logged", "",
                                             "{\"id\": \"00000000-0000-7000-8000-000000000001\"}"));
    other = insert_bad("other.kind", ENVELOPE("other.kind", "", "{\"schema_version\": 2}"));
    relay_test_env(&env, "QUARANTINE", "quarantine");
    relay_test_start(&relay, &env, "quarantine-relay");
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    cr_assert_eq(relay_test_count(conn, "status = 'invalid'"), 3);

    /* Listed, each with the relay's reason; a filter narrows it. */
    ctl_expect(&r, &env, 1, (const char *const[]){"quarantine", "list", "--json", NULL});
    cr_assert_eq(ctl_count(&r, "quarantined"), 3, "%s", r.out);
    cr_assert_eq(ctl_int(ctl_line(&r, "summary", 0), "count"), 3);
    line = line_of(&r, "quarantined", wrong_id);
    cr_assert(line != NULL, "%s", r.out);
    cr_assert_str_eq(ctl_str(line, "reason"), "envelope id differs from the row id");
    cr_assert_str_eq(ctl_str(line, "event_type"), "review.logged");
    cr_assert_str_eq(ctl_str(line, "aggregate_type"), "movie");
    cr_assert(ctl_str(line, "created_at") != NULL);
    cr_assert(strstr(ctl_str(line_of(&r, "quarantined", repairable), "reason"), "occurred_at") !=
                  NULL,
              "%s", r.out);
    cr_assert(ctl_str(line_of(&r, "quarantined", other), "reason")[0] != '\0');
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 1, (const char *const[]){"quarantine", "list", NULL});
    snprintf(sql, sizeof(sql), "quarantined id=%s aggregate_type=movie event_type=review.logged",
             wrong_id);
    cr_assert(strstr(r.out, sql) != NULL, "%s", r.out);
    cr_assert(strstr(r.out, "reason=\"envelope id differs from the row id\"") != NULL, "%s", r.out);
    cr_assert(strstr(r.out, "listed 3 quarantined rows") != NULL, "%s", r.out);
    ctl_run_fini(&r);
    ctl_expect(
        &r, &env, 1,
        (const char *const[]){"quarantine", "list", "--reason-like", "%differs%", "--json", NULL});
    cr_assert_eq(ctl_count(&r, "quarantined"), 1, "%s", r.out);
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 0,
               (const char *const[]){"quarantine", "list", "--event-type", "nothing", NULL});
    ctl_run_fini(&r);

    /* status and validate point to the verb. */
    ctl_expect(&r, &env, 0, (const char *const[]){"status", NULL});
    cr_assert(strstr(r.out, "outboxctl quarantine list") != NULL, "%s", r.out);
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 0, (const char *const[]){"validate", NULL});
    cr_assert(strstr(r.out, "3 rows are quarantined already: outboxctl quarantine list") != NULL,
              "%s", r.out);
    ctl_run_fini(&r);

    /* Repaired by an UPDATE the row trigger checks, then released; a dry run changes nothing. */
    snprintf(sql, sizeof(sql),
             "UPDATE outbox.events SET envelope = envelope || "
             "'{\"occurred_at\": \"2026-11-29T09:41:56.123Z\"}' WHERE id = '%s'",
             repairable);
    harness_exec(conn, sql);
    ctl_expect(&r, &env, 2, (const char *const[]){"quarantine", "release", NULL});
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 1,
               (const char *const[]){"quarantine", "release", "--id", repairable, "--id", wrong_id,
                                     "--dry-run", "--json", NULL});
    cr_assert(line_of(&r, "would_release", repairable) != NULL, "%s", r.out);
    cr_assert(line_of(&r, "still_invalid", wrong_id) != NULL, "%s", r.out);
    ctl_run_fini(&r);
    cr_assert_eq(relay_test_count(conn, "status = 'invalid'"), 3, "a dry run changes nothing");
    ctl_expect(&r, &env, 1,
               (const char *const[]){"quarantine", "release", "--id", repairable, "--id", wrong_id,
                                     "--json", NULL});
    cr_assert_eq(ctl_count(&r, "released"), 1, "%s", r.out);
    cr_assert_str_eq(ctl_str(ctl_line(&r, "released", 0), "id"), repairable);
    line = line_of(&r, "still_invalid", wrong_id);
    cr_assert(line != NULL, "%s", r.out);
    cr_assert_str_eq(ctl_str(line, "reason"), "envelope id differs from the row id");
    cr_assert_eq(ctl_int(ctl_line(&r, "summary", 0), "still_invalid"), 1);
    ctl_run_fini(&r);
    snprintf(sql, sizeof(sql), "INSERT INTO committed VALUES ('%s')", repairable);
    harness_exec(conn, sql);
    HARNESS_WAIT_UNTIL(status_of(repairable, "done") == 1, 30000);
    cr_assert_eq(status_of(wrong_id, "invalid"), 1, "a row that still fails stays quarantined");

    /* purge: a dry run deletes nothing; a filter deletes only what it chooses. */
    ctl_expect(&r, &env, 2, (const char *const[]){"quarantine", "purge", "--json", NULL});
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 0,
               (const char *const[]){"quarantine", "purge", "--event-type", "other.kind",
                                     "--dry-run", "--json", NULL});
    cr_assert_eq(ctl_count(&r, "would_purge"), 1, "%s", r.out);
    ctl_run_fini(&r);
    cr_assert_eq(relay_test_count(conn, "status = 'invalid'"), 2);
    ctl_expect(&r, &env, 0,
               (const char *const[]){"quarantine", "purge", "--event-type", "other.kind", NULL});
    cr_assert(strstr(r.out, "purged 1 quarantined row") != NULL, "%s", r.out);
    ctl_run_fini(&r);
    cr_assert_eq(status_of(other, "invalid"), 0);
    cr_assert_eq(status_of(wrong_id, "invalid"), 1);
    cr_assert_eq(relay_test_count(conn, "true"), 7, "5 good, the released one, the wrong id");
    ctl_expect(&r, &env, 0, (const char *const[]){"quarantine", "purge", "--all", "--json", NULL});
    cr_assert_eq(ctl_count(&r, "purged"), 1, "%s", r.out);
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 0, (const char *const[]){"quarantine", "list", NULL});
    ctl_run_fini(&r);

    relay_test_stop(&relay, 10000);
    relay_test_check(conn, "QUARANTINE"); /* the released row once in the stream */
    free(other);
    free(wrong_id);
    free(repairable);
    relay_env_fini(&env);
}

/*
 * With ordering on, a quarantined row is an ordered aggregate's head: the
 * events behind it are not published while it is there. `quarantine skip`
 * records it as a gap (handler '': relays and every handler go past it),
 * and they go out; the row stays quarantined, and is never released.
 */
Test(ctl_quarantine, skip_lets_the_events_behind_a_quarantined_head_go_on_and_keeps_the_row)
{
    struct relay_env env;
    struct harness_proc relay;
    struct ctl_run r;
    char *head, *agg, sql[512];
    json_t *line;

    harness_exec(conn, "SELECT outbox.set_ordering(true)");
    head = insert_bad("review.logged", ENVELOPE("review.logged", "occurred_at", "{}"));
    snprintf(sql, sizeof(sql), "SELECT aggregate_id::text FROM outbox.events WHERE id = '%s'",
             head);
    agg = harness_scalar_text(conn, sql);
    snprintf(sql, sizeof(sql),
             "INSERT INTO committed SELECT outbox.enqueue('movie', '%s', 'review.logged', "
             "'{}') FROM generate_series(1, 2)",
             agg);
    harness_exec(conn, sql);
    cr_assert_eq(relay_test_count(conn, "aggregate_seq IS NOT NULL"), 3, "an ordered aggregate");
    relay_test_env(&env, "QSKIP", "qskip");
    relay_test_start(&relay, &env, "qskip-relay");
    HARNESS_WAIT_UNTIL(status_of(head, "invalid") == 1 &&
                           relay_test_count(conn, "last_error = 'waiting_for_head'") == 2,
                       30000);
    harness_sleep_ms(1500);
    cr_assert_eq(relay_test_count(conn, "aggregate_seq > 1 AND published_at IS NULL"), 2,
                 "the events behind the quarantined head wait");

    ctl_expect(&r, &env, 2, (const char *const[]){"quarantine", "skip", NULL});
    cr_assert(strstr(r.out, "--all") != NULL, "a skip of everything needs --all: %s", r.out);
    ctl_run_fini(&r);
    ctl_expect(
        &r, &env, 0,
        (const char *const[]){"quarantine", "skip", "--id", head, "--dry-run", "--json", NULL});
    cr_assert_eq(ctl_count(&r, "would_skip"), 1, "%s", r.out);
    ctl_run_fini(&r);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.aggregate_skips"), 0,
                 "a dry run changes nothing");
    ctl_expect(&r, &env, 0,
               (const char *const[]){"quarantine", "skip", "--id", head, "--json", NULL});
    line = line_of(&r, "skipped", head);
    cr_assert(line != NULL, "%s", r.out);
    cr_assert_eq(ctl_int(line, "aggregate_seq"), 1, "%s", r.out);
    cr_assert_str_eq(ctl_str(line, "aggregate_id"), agg, "%s", r.out);
    cr_assert_eq(ctl_int(ctl_line(&r, "summary", 0), "count"), 1, "%s", r.out);
    cr_assert_str_eq(ctl_str(ctl_line(&r, "summary", 0), "action"), "skip", "%s", r.out);
    ctl_run_fini(&r);
    HARNESS_WAIT_UNTIL(
        relay_test_count(conn, "aggregate_seq > 1 AND published_at IS NOT NULL") == 2, 30000);
    cr_assert_eq(status_of(head, "invalid"), 1, "the skipped head stays quarantined");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.aggregate_skips "
                                         "WHERE aggregate_seq = 1 AND handler = ''"),
                 1, "a gap for relays and every handler");

    /* Listed as skipped, never released, and not skipped twice. */
    ctl_expect(&r, &env, 1, (const char *const[]){"quarantine", "list", "--json", NULL});
    cr_assert(json_is_true(json_object_get(line_of(&r, "quarantined", head), "skipped")), "%s",
              r.out);
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 1, (const char *const[]){"quarantine", "release", "--id", head, NULL});
    cr_assert(strstr(r.out, "never published") != NULL, "%s", r.out);
    ctl_run_fini(&r);
    cr_assert_eq(status_of(head, "invalid"), 1, "a skipped row is not released");
    ctl_expect(&r, &env, 0,
               (const char *const[]){"quarantine", "skip", "--id", head, "--json", NULL});
    line = line_of(&r, "not_skipped", head);
    cr_assert(line != NULL, "%s", r.out);
    cr_assert_str_eq(ctl_str(line, "reason"), "skipped already");
    ctl_run_fini(&r);

    relay_test_stop(&relay, 10000);
    free(agg);
    free(head);
    relay_env_fini(&env);
}

/*
 * purge refuses an ordered event not yet skipped: consumers wait for its
 * number, and with the row gone no verb could skip it. In a selection
 * that mixes both, the unordered row is purged, the ordered head is kept
 * and named with the verb to use (exit 1); once skipped, it purges.
 */
Test(ctl_quarantine, purge_refuses_an_ordered_head_until_it_is_skipped)
{
    struct relay_env env;
    struct ctl_run r;
    char *plain, *head;
    json_t *line;

    plain = insert_bad("review.logged", ENVELOPE("review.logged", "occurred_at", "{}"));
    harness_exec(conn, "SELECT outbox.set_ordering(true)");
    head = insert_bad("review.logged", ENVELOPE("review.logged", "occurred_at", "{}"));
    cr_assert_eq(relay_test_count(conn, "aggregate_seq IS NOT NULL"), 1, "one ordered row");
    /* Quarantined as the relay's finish does it (finish_rows.sql's invalid). */
    harness_exec(conn, "UPDATE outbox.events SET status = 'invalid', next_attempt_at = 'infinity', "
                       "last_error = 'envelope: occurred_at is missing'");
    relay_test_env(&env, "QPURGE", "qpurge");

    ctl_expect(&r, &env, 1,
               (const char *const[]){"quarantine", "purge", "--all", "--dry-run", "--json", NULL});
    cr_assert(line_of(&r, "would_purge", plain) != NULL, "%s", r.out);
    cr_assert(line_of(&r, "not_purged", head) != NULL, "%s", r.out);
    ctl_run_fini(&r);
    cr_assert_eq(status_of(plain, "invalid") + status_of(head, "invalid"), 2,
                 "a dry run deletes nothing");

    ctl_expect(&r, &env, 1, (const char *const[]){"quarantine", "purge", "--all", "--json", NULL});
    cr_assert(line_of(&r, "purged", plain) != NULL, "%s", r.out);
    line = line_of(&r, "not_purged", head);
    cr_assert(line != NULL, "%s", r.out);
    cr_assert_eq(ctl_int(line, "aggregate_seq"), 1, "%s", r.out);
    cr_assert(strstr(ctl_str(line, "reason"), head) != NULL, "names the event: %s", r.out);
    cr_assert(strstr(ctl_str(line, "reason"), "outboxctl quarantine skip --id") != NULL,
              "names the verb: %s", r.out);
    cr_assert_eq(ctl_int(ctl_line(&r, "summary", 0), "count"), 1, "%s", r.out);
    cr_assert_eq(ctl_int(ctl_line(&r, "summary", 0), "refused"), 1, "%s", r.out);
    ctl_run_fini(&r);
    cr_assert_eq(status_of(plain, "invalid"), 0, "the unordered row is purged");
    cr_assert_eq(status_of(head, "invalid"), 1, "the ordered head is kept");

    /* Text: the refusal names the event and the verb. */
    ctl_expect(&r, &env, 1, (const char *const[]){"quarantine", "purge", "--id", head, NULL});
    cr_assert(strstr(r.out, head) != NULL && strstr(r.out, "quarantine skip --id") != NULL &&
                  strstr(r.out, "1 refused") != NULL,
              "%s", r.out);
    ctl_run_fini(&r);
    cr_assert_eq(status_of(head, "invalid"), 1, "the ordered head is kept");

    ctl_expect(&r, &env, 0, (const char *const[]){"quarantine", "skip", "--id", head, NULL});
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 0,
               (const char *const[]){"quarantine", "purge", "--id", head, "--json", NULL});
    cr_assert(line_of(&r, "purged", head) != NULL, "a skipped head purges: %s", r.out);
    ctl_run_fini(&r);
    cr_assert_eq(status_of(head, "invalid"), 0, "purged once skipped");

    free(head);
    free(plain);
    relay_env_fini(&env);
}

Test(ctl_quarantine, bad_arguments_are_refused_before_any_server_is_reached)
{
    struct relay_env env;
    struct ctl_run r;

    relay_env_init(&env, "postgresql://127.0.0.1:1/none", "nats://127.0.0.1:1", "X", "x");
    ctl_expect(&r, &env, 2, (const char *const[]){"quarantine", "bury", NULL});
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 2, (const char *const[]){"quarantine", "list", "--dry-run", NULL});
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 2, (const char *const[]){"quarantine", "list", "--handler", "h", NULL});
    cr_assert(strstr(r.out, "--handler is not an option of this verb") != NULL, "%s", r.out);
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 2,
               (const char *const[]){"quarantine", "release", "--id", "42", "--all", NULL});
    cr_assert(strstr(r.out, "--id \"42\" is not a UUID") != NULL, "%s", r.out);
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 2,
               (const char *const[]){"quarantine", "purge", "--limit", "5", "--dry-run", NULL});
    cr_assert(strstr(r.out, "give a filter") != NULL, "%s", r.out);
    ctl_run_fini(&r);
    relay_env_fini(&env);
}
