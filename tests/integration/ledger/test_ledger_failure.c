/* SPDX-License-Identifier: MIT */
/*
 * test_ledger_failure.c - handler failures in the ledger (FAULTS T27 at
 * the ledger level): one attempt per failure, never two, backoff chosen
 * and kept by the database, no attempt spent by a claim during backoff or
 * by a release, dead-lettered exactly at max attempts with the envelope
 * and the reason, and a done row never touched.
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

TestSuite(ledger_failure, .init = setup, .fini = teardown, .timeout = 90);

/* Milliseconds until the row's next try, in database time (this connection's now()). */
static long long
ms_until_due(const char *event_id)
{
    return helper_row_ll(conn, "floor(extract(epoch FROM next_attempt_at - now()) * 1000)::bigint",
                         event_id, "mailer");
}

static int
is_due(void *arg)
{
    return helper_row_ll(conn, "(next_attempt_at <= now())::int", arg, "mailer") == 1;
}

Test(ledger_failure, each_failure_counts_one_attempt_and_waits_the_backoff_in_database_time)
{
    struct helper_events ev = helper_events_new(conn, 1);
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");

    for (int k = 1; k <= 3; k++) {
        struct obx_claim claim = helper_claim_one(ledger, "mailer", &ev.events[0], 30);
        struct obx_claim early;
        struct obx_failure_result failure;
        long long nominal_ms = 1000LL << (k - 1), left_ms;

        cr_assert_eq(claim.state, OBX_CLAIM_RUN, "try %d", k);
        cr_assert_eq(claim.attempts, k - 1);
        failure = helper_fail(ledger, "mailer", &ev.events[0], &claim, "smtp said 451", 10);
        cr_assert_eq(failure.applied, 1);
        cr_assert_eq(failure.attempts, k, "one attempt per failure");
        cr_assert_eq(failure.dead, 0);
        cr_assert(
            failure.retry_ms >= nominal_ms * 9 / 10 && failure.retry_ms <= nominal_ms * 11 / 10,
            "failure %d: retry_ms %lld is not %lld ms +-10 %%", k, failure.retry_ms, nominal_ms);
        left_ms = ms_until_due(ev.ids[0]);
        cr_assert(left_ms <= failure.retry_ms && left_ms > failure.retry_ms - 500,
                  "next_attempt_at - now() = %lld ms, retry_ms %lld", left_ms, failure.retry_ms);
        cr_assert_eq(helper_row_ll(conn, "attempts", ev.ids[0], "mailer"), k);

        early = helper_claim_one(ledger, "mailer", &ev.events[0], 30);
        cr_assert_eq(early.state, OBX_CLAIM_BACKOFF, "a claim before the next try is due");
        cr_assert(early.defer_ms > 0 && early.defer_ms <= failure.retry_ms,
                  "defer_ms %lld, retry_ms %lld", early.defer_ms, failure.retry_ms);
        cr_assert_eq(early.attempts, k);
        cr_assert_eq(helper_row_ll(conn, "attempts", ev.ids[0], "mailer"), k,
                     "a claim during backoff spends no attempt");
        cr_assert(harness_wait_until(is_due, ev.ids[0], 10000), "never due again");
    }
    obx_ledger_close(ledger);
    helper_events_free(&ev);
}

Test(ledger_failure, a_failure_recorded_twice_for_one_claim_counts_once)
{
    struct helper_events ev = helper_events_new(conn, 1);
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");
    struct obx_claim claim = helper_claim_one(ledger, "mailer", &ev.events[0], 30);
    struct obx_failure_result first, second;

    first = helper_fail(ledger, "mailer", &ev.events[0], &claim, "timeout", 10);
    second = helper_fail(ledger, "mailer", &ev.events[0], &claim, "timeout", 10);
    cr_assert_eq(first.applied, 1);
    cr_assert_eq(second.applied, 0, "the claim was released by the first call");
    cr_assert_eq(helper_row_ll(conn, "attempts", ev.ids[0], "mailer"), 1);
    obx_ledger_close(ledger);
    helper_events_free(&ev);
}

/* Makes a backoff run out now, so the next claim may run (timing is not this test's point). */
static void
skip_backoff(const char *event_id)
{
    char sql[256];

    snprintf(sql, sizeof(sql),
             "UPDATE outbox.processed_events SET next_attempt_at = now() "
             "WHERE event_id = '%s' AND dead_at IS NULL",
             event_id);
    harness_exec(conn, sql);
}

Test(ledger_failure, the_last_allowed_failure_dead_letters_the_event_once_with_envelope_and_reason)
{
    struct helper_events ev = helper_events_new(conn, 1);
    struct obx_ledger *a = helper_ledger_open("ledger-a");
    struct obx_ledger *b = helper_ledger_open("ledger-b");
    struct obx_failure_result failure = {0};
    struct obx_claim claim = {0}, later;
    char sql[512];

    for (int k = 1; k <= 3; k++) {
        claim = helper_claim_one(a, "mailer", &ev.events[0], 30);
        cr_assert_eq(claim.state, OBX_CLAIM_RUN, "try %d", k);
        failure = helper_fail(a, "mailer", &ev.events[0], &claim, "mailbox full", 3);
        cr_assert_eq(failure.attempts, k);
        cr_assert_eq(failure.dead, k == 3, "dead exactly at max_attempts, not at %d", k);
        cr_assert_eq(helper_count(conn, "dead_letters", "true"), k == 3 ? 1 : 0);
        skip_backoff(ev.ids[0]);
    }
    cr_assert_eq(failure.retry_ms, 0);
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM outbox.dead_letters d JOIN outbox.events e ON e.id = d.event_id "
             "WHERE d.event_id = '%s' AND d.handler = 'mailer' AND d.envelope = e.envelope "
             "AND d.reason = 'mailbox full' AND d.attempts = 3",
             ev.ids[0]);
    cr_assert_eq(harness_scalar_ll(conn, sql), 1, "the dead letter holds envelope and reason");
    cr_assert_eq(helper_row_ll(conn,
                               "(dead_at IS NOT NULL AND owner_token IS NULL AND status = "
                               "'in_progress' AND attempts = 3)::int",
                               ev.ids[0], "mailer"),
                 1);
    cr_assert_eq(helper_claim_one(a, "mailer", &ev.events[0], 30).state, OBX_CLAIM_DEAD);
    later = helper_claim_one(b, "mailer", &ev.events[0], 30);
    cr_assert_eq(later.state, OBX_CLAIM_DEAD, "dead for every ledger");
    cr_assert_eq(later.attempts, 3);
    failure = helper_fail(a, "mailer", &ev.events[0], &claim, "again", 3);
    cr_assert_eq(failure.applied, 0, "the claim that died counts no more failures");
    cr_assert_eq(helper_count(conn, "dead_letters", "true"), 1);
    obx_ledger_close(b);
    obx_ledger_close(a);
    helper_events_free(&ev);
}

Test(ledger_failure, a_release_spends_no_attempt_and_defers_the_next_claim)
{
    struct helper_events ev = helper_events_new(conn, 1);
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");
    struct obx_claim claim = helper_claim_one(ledger, "mailer", &ev.events[0], 30);
    struct obx_claim later;
    outbox_error err;

    LEDGER_OK(obx_ledger_release(ledger, "mailer", &ev.events[0], &claim, 5000, &err));
    cr_assert_eq(
        helper_row_ll(conn, "(attempts = 0 AND owner_token IS NULL)::int", ev.ids[0], "mailer"), 1);
    later = helper_claim_one(ledger, "mailer", &ev.events[0], 30);
    cr_assert_eq(later.state, OBX_CLAIM_BACKOFF);
    cr_assert(later.defer_ms > 4000 && later.defer_ms <= 5000, "defer_ms %lld", later.defer_ms);
    cr_assert_eq(later.attempts, 0, "no attempt spent");
    skip_backoff(ev.ids[0]);
    later = helper_claim_one(ledger, "mailer", &ev.events[0], 30);
    cr_assert_eq(later.state, OBX_CLAIM_RUN, "due again after the delay");
    cr_assert_eq(later.attempts, 0);
    obx_ledger_close(ledger);
    helper_events_free(&ev);
}

Test(ledger_failure, a_failure_never_touches_a_done_row)
{
    struct helper_events ev = helper_events_new(conn, 1);
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");
    struct obx_claim claim = helper_claim_one(ledger, "mailer", &ev.events[0], 30);
    struct obx_failure_result failure;

    cr_assert_eq(helper_mark_done(ledger, "mailer", &ev.events[0], &claim, 1), 1);
    failure = helper_fail(ledger, "mailer", &ev.events[0], &claim, "late failure", 1);
    cr_assert_eq(failure.applied, 0);
    cr_assert_eq(helper_row_ll(conn,
                               "(status = 'done' AND attempts = 0 AND dead_at IS NULL AND "
                               "last_error IS NULL)::int",
                               ev.ids[0], "mailer"),
                 1);
    cr_assert_eq(helper_count(conn, "dead_letters", "true"), 0);
    obx_ledger_close(ledger);
    helper_events_free(&ev);
}

Test(ledger_failure, a_failure_whose_claim_was_rolled_back_recreates_the_row_with_one_attempt)
{
    struct helper_events ev = helper_events_new(conn, 2);
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");
    struct obx_claim *claims;
    struct obx_failure_result failure;
    outbox_error err;

    LEDGER_OK(obx_ledger_begin(ledger, &err));
    claims = helper_claim(ledger, "mailer", ev.events, 2, 30);
    obx_ledger_rollback(ledger); /* the claims went with the handler's effects */
    cr_assert_eq(helper_count(conn, "processed_events", "true"), 0);

    failure = helper_fail(ledger, "mailer", &ev.events[0], &claims[0], "crashed", 5);
    cr_assert_eq(failure.applied, 1);
    cr_assert_eq(failure.attempts, 1);
    cr_assert(failure.retry_ms >= 900 && failure.retry_ms <= 1100, "retry_ms %lld",
              failure.retry_ms);
    cr_assert_eq(helper_row_ll(conn,
                               "(status = 'in_progress' AND owner_token IS NULL AND attempts = 1 "
                               "AND last_error = 'crashed' AND next_attempt_at > now())::int",
                               ev.ids[0], "mailer"),
                 1);
    failure = helper_fail(ledger, "mailer", &ev.events[0], &claims[0], "crashed", 5);
    cr_assert_eq(failure.applied, 0, "the same failure is not counted twice");
    cr_assert_eq(helper_row_ll(conn, "attempts", ev.ids[0], "mailer"), 1);

    failure = helper_fail(ledger, "mailer", &ev.events[1], &claims[1], "crashed", 1);
    cr_assert_eq(failure.dead, 1, "with max_attempts 1 the recreated row is dead at once");
    cr_assert_eq(helper_count(conn, "dead_letters", "handler = 'mailer'"), 1);
    free(claims);
    obx_ledger_close(ledger);
    helper_events_free(&ev);
}

Test(ledger_failure, a_dead_letter_is_written_even_for_a_bad_reason_and_a_bad_envelope)
{
    struct helper_events ev = helper_events_new(conn, 1);
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");
    struct obx_ledger_event odd = {.event_id = ev.ids[0], .envelope = "{not json"};
    struct obx_claim claim = helper_claim_one(ledger, "mailer", &odd, 30);
    struct obx_failure_result failure;
    char *reason;

    failure = helper_fail(ledger, "mailer", &odd, &claim, "bad \xff byte\nand a line", 1);
    cr_assert_eq(failure.dead, 1);
    reason = harness_scalar_text(conn, "SELECT reason FROM outbox.dead_letters");
    cr_assert_str_eq(reason, "bad ? byte?and a line");
    free(reason);
    cr_assert_eq(helper_count(conn, "dead_letters", "envelope IS NULL"), 1,
                 "an envelope jsonb refuses is left out, not the dead letter");
    obx_ledger_close(ledger);
    helper_events_free(&ev);
}
