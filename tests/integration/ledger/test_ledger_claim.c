/* SPDX-License-Identifier: MIT */
/*
 * test_ledger_claim.c - who may run handler H for event E: a fresh claim
 * runs, a live claim elsewhere is busy until its lease ends, done is done
 * for everyone, handlers are independent, an expired claim is taken over
 * and its stale owner changes nothing (FAULTS T08 at the ledger level),
 * and a batch of 1000 is one claim statement and one done statement.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ledger/ledger.h"
#include "ledger_helpers.h"

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

TestSuite(ledger_claim, .init = setup, .fini = teardown, .timeout = 60);

Test(ledger_claim, a_fresh_claim_runs_under_one_new_owner_token_with_no_attempts)
{
    struct helper_events ev = helper_events_new(conn, 3);
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");
    struct obx_claim *claims = helper_claim(ledger, "mailer", ev.events, ev.count, 30);
    char *token;

    for (size_t i = 0; i < ev.count; i++) {
        cr_assert_eq(claims[i].state, OBX_CLAIM_RUN, "event %zu", i);
        cr_assert_eq(claims[i].attempts, 0);
        cr_assert_eq(claims[i].defer_ms, 0);
        cr_assert_eq(strlen(claims[i].owner_token), 36);
        cr_assert_str_eq(claims[i].owner_token, claims[0].owner_token);
        token = helper_row_text(conn, "owner_token::text", ev.ids[i], "mailer");
        cr_assert_str_eq(token, claims[i].owner_token, "the row carries the returned token");
        free(token);
        cr_assert_eq(helper_row_ll(conn,
                                   "(status = 'in_progress' AND claimed_until BETWEEN "
                                   "now() + interval '25 s' AND now() + interval '31 s')::int",
                                   ev.ids[i], "mailer"),
                     1, "claimed for the lease, in database time");
    }
    free(claims);
    obx_ledger_close(ledger);
    helper_events_free(&ev);
}

Test(ledger_claim, a_live_claim_is_busy_for_another_ledger_until_its_lease_ends)
{
    struct helper_events ev = helper_events_new(conn, 1);
    struct obx_ledger *a = helper_ledger_open("ledger-a");
    struct obx_ledger *b = helper_ledger_open("ledger-b");
    struct obx_claim first = helper_claim_one(a, "mailer", &ev.events[0], 30);
    struct obx_claim second = helper_claim_one(b, "mailer", &ev.events[0], 30);
    char *token;

    cr_assert_eq(first.state, OBX_CLAIM_RUN);
    cr_assert_eq(second.state, OBX_CLAIM_BUSY);
    cr_assert(second.defer_ms > 25000 && second.defer_ms <= 30000,
              "defer_ms %lld should be the rest of the 30 s lease", second.defer_ms);
    cr_assert_str_empty(second.owner_token);
    token = helper_row_text(conn, "owner_token::text", ev.ids[0], "mailer");
    cr_assert_str_eq(token, first.owner_token, "the busy claim changed nothing");
    free(token);
    obx_ledger_close(b);
    obx_ledger_close(a);
    helper_events_free(&ev);
}

Test(ledger_claim, a_done_event_is_done_for_every_ledger_and_never_runs_again)
{
    struct helper_events ev = helper_events_new(conn, 2);
    struct obx_ledger *a = helper_ledger_open("ledger-a");
    struct obx_ledger *b = helper_ledger_open("ledger-b");
    struct obx_claim *claims = helper_claim(a, "mailer", ev.events, ev.count, 30);
    struct obx_claim *again;

    cr_assert_eq(helper_mark_done(a, "mailer", ev.events, claims, ev.count), 2);
    again = helper_claim(b, "mailer", ev.events, ev.count, 30);
    for (size_t i = 0; i < ev.count; i++) {
        cr_assert_eq(again[i].state, OBX_CLAIM_DONE, "event %zu for ledger b", i);
        cr_assert_eq(helper_row_ll(conn,
                                   "(status = 'done' AND finished_at IS NOT NULL AND owner_token "
                                   "IS NULL AND claimed_until IS NULL)::int",
                                   ev.ids[i], "mailer"),
                     1);
    }
    free(again);
    again = helper_claim(a, "mailer", ev.events, ev.count, 30);
    cr_assert_eq(again[0].state, OBX_CLAIM_DONE, "done for its own ledger too");
    cr_assert_eq(helper_mark_done(a, "mailer", ev.events, claims, ev.count), 0,
                 "a second done changes nothing");
    free(again);
    free(claims);
    obx_ledger_close(b);
    obx_ledger_close(a);
    helper_events_free(&ev);
}

Test(ledger_claim, each_handler_claims_the_same_event_independently)
{
    struct helper_events ev = helper_events_new(conn, 1);
    struct obx_ledger *a = helper_ledger_open("ledger-a");
    struct obx_ledger *b = helper_ledger_open("ledger-b");
    struct obx_claim mail = helper_claim_one(a, "mailer", &ev.events[0], 30);
    struct obx_claim search = helper_claim_one(b, "search.indexer", &ev.events[0], 30);

    cr_assert_eq(mail.state, OBX_CLAIM_RUN);
    cr_assert_eq(search.state, OBX_CLAIM_RUN, "another handler is not busy");
    cr_assert_eq(helper_mark_done(a, "mailer", &ev.events[0], &mail, 1), 1);
    cr_assert_eq(helper_row_ll(conn, "(status = 'in_progress')::int", ev.ids[0], "search.indexer"),
                 1, "done for one handler leaves the other running");
    cr_assert_eq(helper_claim_one(a, "search.indexer", &ev.events[0], 30).state, OBX_CLAIM_BUSY);
    obx_ledger_close(b);
    obx_ledger_close(a);
    helper_events_free(&ev);
}

static int
lease_ran_out(void *arg)
{
    const char *event_id = arg;
    char sql[256];

    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM outbox.processed_events WHERE event_id = '%s' "
             "AND claimed_until < now()",
             event_id);
    return harness_scalar_ll(conn, sql) == 1;
}

/*
 * FAULTS T08 at the ledger level: worker A (think SIGSTOPped) holds a
 * 1 s claim; it runs out in database time, B takes over with a new token
 * and finishes; A wakes and tries done, failure and release: 0 rows.
 */
Test(ledger_claim, an_expired_claim_is_taken_over_and_the_stale_owner_changes_nothing)
{
    struct helper_events ev = helper_events_new(conn, 1);
    struct obx_ledger *a = helper_ledger_open("ledger-a");
    struct obx_ledger *b = helper_ledger_open("ledger-b");
    struct obx_claim stale = helper_claim_one(a, "mailer", &ev.events[0], 1);
    struct obx_failure_result failure;
    struct obx_claim fresh;
    char *token;
    outbox_error err;

    cr_assert_eq(stale.state, OBX_CLAIM_RUN);
    cr_assert(harness_wait_until(lease_ran_out, ev.ids[0], 10000), "the 1 s lease never ran out");
    fresh = helper_claim_one(b, "mailer", &ev.events[0], 60);
    cr_assert_eq(fresh.state, OBX_CLAIM_RUN, "an expired claim is taken over");
    cr_assert_str_neq(fresh.owner_token, stale.owner_token, "with a new owner token");
    cr_assert_eq(helper_claim_one(a, "mailer", &ev.events[0], 1).state, OBX_CLAIM_BUSY);

    cr_assert_eq(helper_mark_done(a, "mailer", &ev.events[0], &stale, 1), 0);
    failure = helper_fail(a, "mailer", &ev.events[0], &stale, "stale failure", 3);
    cr_assert_eq(failure.applied, 0);
    LEDGER_OK(obx_ledger_release(a, "mailer", &ev.events[0], &stale, 5000, &err));
    token = helper_row_text(conn, "owner_token::text", ev.ids[0], "mailer");
    cr_assert_str_eq(token, fresh.owner_token, "the new owner still holds the claim");
    free(token);
    cr_assert_eq(helper_row_ll(conn,
                               "(attempts = 0 AND last_error IS NULL AND next_attempt_at IS NULL "
                               "AND claimed_until > now() + interval '50 s')::int",
                               ev.ids[0], "mailer"),
                 1, "the stale owner's failure and release changed nothing");

    cr_assert_eq(helper_mark_done(b, "mailer", &ev.events[0], &fresh, 1), 1);
    cr_assert_eq(helper_claim_one(a, "mailer", &ev.events[0], 1).state, OBX_CLAIM_DONE);
    obx_ledger_close(b);
    obx_ledger_close(a);
    helper_events_free(&ev);
}

/* T08's other variant: the production lease, run out by moving the claim back 31 min in SQL. */
Test(ledger_claim, a_production_length_claim_is_taken_over_only_when_database_time_says_so)
{
    struct helper_events ev = helper_events_new(conn, 1);
    struct obx_ledger *a = helper_ledger_open("ledger-a");
    struct obx_ledger *b = helper_ledger_open("ledger-b");
    struct obx_claim first = helper_claim_one(a, "mailer", &ev.events[0], 1800);
    struct obx_claim second = helper_claim_one(b, "mailer", &ev.events[0], 1800);
    char sql[256];

    cr_assert_eq(first.state, OBX_CLAIM_RUN);
    cr_assert_eq(second.state, OBX_CLAIM_BUSY);
    cr_assert(second.defer_ms > 1790000 && second.defer_ms <= 1800000, "defer_ms %lld",
              second.defer_ms);
    snprintf(sql, sizeof(sql),
             "UPDATE outbox.processed_events SET started_at = started_at - interval '31 min', "
             "claimed_until = claimed_until - interval '31 min' WHERE event_id = '%s'",
             ev.ids[0]);
    harness_exec(conn, sql);
    second = helper_claim_one(b, "mailer", &ev.events[0], 1800);
    cr_assert_eq(second.state, OBX_CLAIM_RUN, "30 min in database time have passed");
    cr_assert_eq(helper_mark_done(a, "mailer", &ev.events[0], &first, 1), 0);
    cr_assert_eq(helper_mark_done(b, "mailer", &ev.events[0], &second, 1), 1);
    obx_ledger_close(b);
    obx_ledger_close(a);
    helper_events_free(&ev);
}

Test(ledger_claim, an_event_repeated_in_one_batch_runs_once)
{
    struct helper_events ev = helper_events_new(conn, 2);
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");
    struct obx_ledger_event batch[] = {ev.events[0], ev.events[1], ev.events[0]};
    struct obx_claim *claims = helper_claim(ledger, "mailer", batch, 3, 30);

    cr_assert_eq(claims[0].state, OBX_CLAIM_RUN);
    cr_assert_eq(claims[1].state, OBX_CLAIM_RUN);
    cr_assert_eq(claims[2].state, OBX_CLAIM_BUSY, "the copy finds the first one's live claim");
    cr_assert_eq(helper_mark_done(ledger, "mailer", batch, claims, 3), 2);
    free(claims);
    obx_ledger_close(ledger);
    helper_events_free(&ev);
}

/*
 * Statement-level triggers log every write statement on the ledger with
 * the rows it touched and statement_timestamp(), which is the arrival of
 * the client's command: one distinct timestamp is one round trip.
 */
static void
log_ledger_statements(void)
{
    harness_exec(conn, "CREATE TABLE stmt_log (op text, row_count bigint, at timestamptz)");
    harness_exec(conn,
                 "CREATE FUNCTION log_stmt() RETURNS trigger LANGUAGE plpgsql AS $$ "
                 "BEGIN INSERT INTO public.stmt_log SELECT TG_OP, count(*), statement_timestamp() "
                 "FROM changed; RETURN NULL; END $$");
    harness_exec(conn, "CREATE TRIGGER log_insert AFTER INSERT ON outbox.processed_events "
                       "REFERENCING NEW TABLE AS changed FOR EACH STATEMENT "
                       "EXECUTE FUNCTION log_stmt()");
    harness_exec(conn, "CREATE TRIGGER log_update AFTER UPDATE ON outbox.processed_events "
                       "REFERENCING NEW TABLE AS changed FOR EACH STATEMENT "
                       "EXECUTE FUNCTION log_stmt()");
}

Test(ledger_claim, a_batch_of_a_thousand_is_one_claim_statement_and_one_done_statement)
{
    struct helper_events ev = helper_events_new(conn, 1000);
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");
    struct obx_claim *claims;

    cr_assert_eq(ev.count, 1000);
    log_ledger_statements();
    claims = helper_claim(ledger, "mailer", ev.events, ev.count, 30);
    for (size_t i = 0; i < ev.count; i++) {
        cr_assert_eq(claims[i].state, OBX_CLAIM_RUN, "event %zu", i);
    }
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(DISTINCT at) FROM stmt_log"), 1,
                 "one client statement claimed the batch");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM stmt_log WHERE op = 'INSERT'"), 1);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT row_count FROM stmt_log WHERE op = 'INSERT'"),
                 1000, "one INSERT wrote all 1000 claims");

    harness_exec(conn, "TRUNCATE stmt_log");
    cr_assert_eq(helper_mark_done(ledger, "mailer", ev.events, claims, ev.count), 1000);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM stmt_log"), 1,
                 "one UPDATE marked the batch done");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT row_count FROM stmt_log"), 1000);
    free(claims);
    obx_ledger_close(ledger);
    helper_events_free(&ev);
}

Test(ledger_claim, a_bad_handler_or_event_id_is_refused_before_anything_is_sent)
{
    struct helper_events ev = helper_events_new(conn, 1);
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");
    struct obx_ledger_event bad = {.event_id = "not-a-uuid", .envelope = "{}"};
    struct obx_ledger_event batch[] = {ev.events[0], bad};
    struct obx_claim claims[2];
    outbox_error err;

    cr_assert_eq(obx_ledger_claim(ledger, "mail er", ev.events, 1, 30, 0, claims, &err),
                 OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "\"mail er\"") != NULL, "message: %s", err.message);
    cr_assert_eq(obx_ledger_claim(ledger, "mailer", batch, 2, 30, 0, claims, &err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "\"not-a-uuid\"") != NULL, "message: %s", err.message);
    cr_assert_eq(obx_ledger_claim(ledger, "mailer", ev.events, 1, 0, 0, claims, &err),
                 OUTBOX_EINVAL, "a lease of 0 s");
    cr_assert_eq(helper_count(conn, "processed_events", "true"), 0, "nothing was claimed");
    obx_ledger_close(ledger);
    helper_events_free(&ev);
}

/* SQLSTATE of one ledger row written by hand under handler `name`; "" when it committed. */
static char *
insert_as(const char *name)
{
    const char *params[] = {name};
    PGresult *res = PQexecParams(conn,
                                 "INSERT INTO outbox.processed_events (event_id, handler) "
                                 "VALUES (gen_random_uuid(), $1)",
                                 1, NULL, params, NULL, NULL, 0);
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *constraint = PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME);
    char *out = malloc(96);

    cr_assert_not_null(out);
    snprintf(out, 96, "%s%s%s", state != NULL ? state : "", constraint != NULL ? " " : "",
             constraint != NULL ? constraint : "");
    PQclear(res);
    return out;
}

/*
 * The table's own rule on handler names (migration 0034 wrote it again, cheaper) is the
 * rule the ledger's callers check: 1 to 64 of A-Z a-z 0-9 _ . -, nothing else, for a row
 * written by any client. And it is valid in the catalog: 0035 checked the rows before it.
 */
Test(ledger_claim, the_tables_handler_rule_takes_exactly_the_names_the_ledger_allows)
{
    char longest[65], too_long[66];
    const char *allowed[] = {"a", "Z9", "mail.er-v2_EU", longest};
    const char *refused[] = {"", too_long, "bad name", "caf\xc3\xa9", "a/b", "a\nb", "a;b"};
    char *got;

    memset(longest, 'h', 64);
    longest[64] = '\0';
    memset(too_long, 'h', 65);
    too_long[65] = '\0';
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++) {
        cr_assert(obx_ledger_handler_name_valid(allowed[i]), "the ledger allows %s", allowed[i]);
        got = insert_as(allowed[i]);
        cr_assert_str_eq(got, "", "handler \"%s\" is refused by the table: %s", allowed[i], got);
        free(got);
    }
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        cr_assert_not(obx_ledger_handler_name_valid(refused[i]), "the ledger refuses %s",
                      refused[i]);
        got = insert_as(refused[i]);
        cr_assert_str_eq(got, "23514 processed_events_handler_name",
                         "handler \"%s\" (%zu bytes): %s", refused[i], strlen(refused[i]), got);
        free(got);
    }
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM pg_constraint "
                                         "WHERE conname = 'processed_events_handler_name' "
                                         "AND convalidated"),
                 1, "the rule is valid in the catalog");
}
