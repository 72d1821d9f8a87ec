/* SPDX-License-Identifier: MIT */
/*
 * test_ledger_txn.c - the transactional path: claim, the handler's own
 * statements and done commit together; a consumer killed before commit
 * leaves no claim and no effect; a failed statement is undone to its
 * savepoint and the batch goes on; a claim waits only briefly for a row
 * another open transaction holds, and the caller's transaction survives.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "ledger/ledger.h"
#include "ledger_helpers.h"

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    /* No unique constraint: a duplicated effect must show up as a second row. */
    harness_exec(conn, "CREATE TABLE public.effects (event_id uuid, doc jsonb)");
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(ledger_txn, .init = setup, .fini = teardown, .timeout = 60);

static const char insert_effect[] =
    "INSERT INTO public.effects (event_id, doc) VALUES (($1->>'id')::uuid, $1)";

Test(ledger_txn, a_handler_statement_commits_together_with_its_claim_and_done)
{
    struct helper_events ev = helper_events_new(conn, 1);
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");
    struct obx_claim claim;
    outbox_error err;
    char sql[256];

    LEDGER_OK(obx_ledger_begin(ledger, &err));
    claim = helper_claim_one(ledger, "projector", &ev.events[0], 30);
    cr_assert_eq(claim.state, OBX_CLAIM_RUN);
    LEDGER_OK(obx_ledger_run_sql(ledger, insert_effect, ev.envelopes[0], &err));
    cr_assert_eq(helper_mark_done(ledger, "projector", &ev.events[0], &claim, 1), 1);
    cr_assert_eq(helper_count(conn, "processed_events", "true"), 0, "nothing before commit");
    LEDGER_OK(obx_ledger_commit(ledger, &err));

    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM public.effects f JOIN outbox.events e ON e.id = f.event_id "
             "WHERE f.doc = e.envelope AND e.id = '%s'",
             ev.ids[0]);
    cr_assert_eq(harness_scalar_ll(conn, sql), 1, "the effect, with the envelope as $1");
    cr_assert_eq(helper_row_ll(conn, "(status = 'done')::int", ev.ids[0], "projector"), 1);
    obx_ledger_close(ledger);
    helper_events_free(&ev);
}

/* How a child consumer ends before it commits. */
enum child_end { CHILD_EXITS, CHILD_IS_KILLED };

/*
 * A consumer in a child process: begin, claim, the handler's insert, then
 * it tells the parent and either exits without commit or waits to be
 * SIGKILLed. Only _exit() in here: the child must not run the test
 * framework's exit handlers.
 */
static void
run_child(const struct obx_ledger_event *event, enum child_end end, int ready_fd)
{
    struct obx_store_options opts = {
        .conninfo = harness_db_url(), .schema = "outbox", .application_name = "ledger-child"};
    struct obx_ledger *ledger = NULL;
    struct obx_claim claim;

    if (obx_ledger_open(&opts, &ledger, NULL) != OUTBOX_OK ||
        obx_ledger_begin(ledger, NULL) != OUTBOX_OK ||
        obx_ledger_claim(ledger, "projector", event, 1, 30, 1000, &claim, NULL) != OUTBOX_OK ||
        claim.state != OBX_CLAIM_RUN ||
        obx_ledger_run_sql(ledger, insert_effect, event->envelope, NULL) != OUTBOX_OK) {
        _exit(3);
    }
    if (write(ready_fd, "r", 1) != 1) {
        _exit(4);
    }
    if (end == CHILD_EXITS) {
        _exit(0);
    }
    for (;;) {
        pause();
    }
}

static int
child_backend_gone(void *arg)
{
    (void)arg;
    return harness_scalar_ll(conn, "SELECT count(*) FROM pg_stat_activity "
                                   "WHERE application_name = 'ledger-child'") == 0;
}

static void
consumer_dies_before_commit(enum child_end end)
{
    struct helper_events ev = helper_events_new(conn, 1);
    struct obx_ledger *ledger;
    struct obx_claim claim;
    int fds[2], wstatus = 0;
    char byte = 0;
    pid_t pid;
    outbox_error err;

    cr_assert_eq(pipe(fds), 0);
    pid = fork();
    cr_assert(pid >= 0, "fork failed");
    if (pid == 0) {
        close(fds[0]);
        run_child(&ev.events[0], end, fds[1]);
    }
    close(fds[1]);
    if (read(fds[0], &byte, 1) != 1) {
        kill(pid, SIGKILL);
    }
    close(fds[0]);
    cr_assert_eq(byte, 'r', "the child consumer did not get as far as its handler");
    if (end == CHILD_IS_KILLED) {
        cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM pg_stat_activity WHERE "
                                             "application_name = 'ledger-child' AND "
                                             "state = 'idle in transaction'"),
                     1, "the child holds its claim in an open transaction");
        kill(pid, SIGKILL);
    }
    cr_assert_eq(waitpid(pid, &wstatus, 0), pid);
    cr_assert(harness_wait_until(child_backend_gone, NULL, 10000), "the backend stayed");

    cr_assert_eq(helper_count(conn, "processed_events", "true"), 0, "no claim left behind");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM public.effects"), 0);
    ledger = helper_ledger_open("ledger-test");
    LEDGER_OK(obx_ledger_begin(ledger, &err));
    claim = helper_claim_one(ledger, "projector", &ev.events[0], 30);
    cr_assert_eq(claim.state, OBX_CLAIM_RUN, "the next consumer runs the handler");
    LEDGER_OK(obx_ledger_run_sql(ledger, insert_effect, ev.envelopes[0], &err));
    cr_assert_eq(helper_mark_done(ledger, "projector", &ev.events[0], &claim, 1), 1);
    LEDGER_OK(obx_ledger_commit(ledger, &err));
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM public.effects"), 1,
                 "the effect happened exactly once");
    obx_ledger_close(ledger);
    helper_events_free(&ev);
}

Test(ledger_txn, a_consumer_that_exits_before_commit_leaves_no_claim_and_no_effect)
{
    consumer_dies_before_commit(CHILD_EXITS);
}

Test(ledger_txn, a_consumer_killed_before_commit_leaves_no_claim_and_no_effect)
{
    consumer_dies_before_commit(CHILD_IS_KILLED);
}

/* Handler statement for event i of the batch: the second one fails. */
static const char *
statement_for(size_t i)
{
    return i == 1 ? "SELECT 1 / (length($1::text) - length($1::text))" : insert_effect;
}

Test(ledger_txn, a_failed_handler_statement_is_undone_to_its_savepoint_and_the_batch_goes_on)
{
    struct helper_events ev = helper_events_new(conn, 3);
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");
    struct obx_claim *claims;
    struct obx_failure_result failure = {0};
    outbox_error err;

    LEDGER_OK(obx_ledger_begin(ledger, &err));
    claims = helper_claim(ledger, "projector", ev.events, 3, 30);
    for (size_t i = 0; i < 3; i++) {
        outbox_status status;

        LEDGER_OK(obx_ledger_savepoint(ledger, &err));
        status = obx_ledger_run_sql(ledger, statement_for(i), ev.envelopes[i], &err);
        if (i != 1) {
            cr_assert_eq(status, OUTBOX_OK, "event %zu: %s", i, err.message);
        } else {
            cr_assert_eq(status, OUTBOX_EREJECTED, "a handler failure, not an outage");
            cr_assert(strstr(err.message, "division by zero") != NULL, "%s", err.message);
            cr_assert_str_eq(err.sqlstate, "22012");
            LEDGER_OK(obx_ledger_rollback_to_savepoint(ledger, &err));
            failure =
                helper_fail(ledger, "projector", &ev.events[i], &claims[i], "division by zero", 5);
            claims[i].state = OBX_CLAIM_BUSY; /* not to be marked done */
        }
        LEDGER_OK(obx_ledger_release_savepoint(ledger, &err));
    }
    cr_assert_eq(failure.applied, 1);
    cr_assert_eq(failure.attempts, 1);
    cr_assert_eq(helper_mark_done(ledger, "projector", ev.events, claims, 3), 2);
    LEDGER_OK(obx_ledger_commit(ledger, &err));

    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM public.effects"), 2);
    cr_assert_eq(helper_count(conn, "processed_events", "status = 'done'"), 2);
    cr_assert_eq(helper_row_ll(conn,
                               "(status = 'in_progress' AND attempts = 1 AND owner_token IS NULL "
                               "AND next_attempt_at > now())::int",
                               ev.ids[1], "projector"),
                 1, "the failed event counted one attempt and waits for its next try");
    free(claims);
    obx_ledger_close(ledger);
    helper_events_free(&ev);
}

Test(ledger_txn, a_failure_after_its_claim_was_rolled_back_to_a_savepoint_counts_one_attempt)
{
    struct helper_events ev = helper_events_new(conn, 1);
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");
    struct obx_failure_result failure;
    struct obx_claim claim;
    outbox_error err;

    LEDGER_OK(obx_ledger_begin(ledger, &err));
    LEDGER_OK(obx_ledger_savepoint(ledger, &err));
    claim = helper_claim_one(ledger, "projector", &ev.events[0], 30);
    cr_assert_eq(obx_ledger_run_sql(ledger, "SELECT 1/0", ev.envelopes[0], &err), OUTBOX_EREJECTED);
    LEDGER_OK(obx_ledger_rollback_to_savepoint(ledger, &err)); /* the claim too */
    failure = helper_fail(ledger, "projector", &ev.events[0], &claim, "division by zero", 5);
    LEDGER_OK(obx_ledger_release_savepoint(ledger, &err));
    LEDGER_OK(obx_ledger_commit(ledger, &err));
    cr_assert_eq(failure.applied, 1);
    cr_assert_eq(failure.attempts, 1);
    cr_assert_eq(helper_row_ll(conn, "attempts", ev.ids[0], "projector"), 1);
    cr_assert_eq(helper_claim_one(ledger, "projector", &ev.events[0], 30).state, OBX_CLAIM_BACKOFF);
    obx_ledger_close(ledger);
    helper_events_free(&ev);
}

/* A claim's duration in ms, asserting it succeeded. */
static long long
timed_claim(struct obx_ledger *ledger, const struct obx_ledger_event *events, size_t count,
            struct obx_claim *out)
{
    long long started_ms = harness_now_ms();
    outbox_error err;

    LEDGER_OK(obx_ledger_claim(ledger, "projector", events, count, 30, 200, out, &err));
    return harness_now_ms() - started_ms;
}

Test(ledger_txn, a_claim_waits_only_briefly_for_a_row_another_open_transaction_holds)
{
    struct helper_events ev = helper_events_new(conn, 3);
    struct obx_ledger *holder = helper_ledger_open("ledger-holder");
    struct obx_ledger *other = helper_ledger_open("ledger-other");
    struct obx_ledger_event pair[2] = {ev.events[0], ev.events[1]};
    struct obx_claim held, got[2];
    long long took_ms;
    outbox_error err;

    LEDGER_OK(obx_ledger_begin(holder, &err));
    held = helper_claim_one(holder, "projector", &ev.events[0], 30);
    cr_assert_eq(held.state, OBX_CLAIM_RUN);

    took_ms = timed_claim(other, pair, 2, got); /* outside a transaction */
    cr_assert(took_ms < 5000, "waited %lld ms for a 200 ms lock wait", took_ms);
    cr_assert_eq(got[0].state, OBX_CLAIM_BUSY, "held by an uncommitted claim");
    cr_assert_eq(got[0].defer_ms, 1000);
    cr_assert_eq(got[1].state, OBX_CLAIM_RUN, "the rest of the batch is claimed");

    pair[1] = ev.events[2];
    LEDGER_OK(obx_ledger_begin(other, &err));
    took_ms = timed_claim(other, pair, 2, got); /* inside one */
    cr_assert(took_ms < 5000, "waited %lld ms for a 200 ms lock wait", took_ms);
    cr_assert_eq(got[0].state, OBX_CLAIM_BUSY);
    cr_assert_eq(got[1].state, OBX_CLAIM_RUN);
    LEDGER_OK(obx_ledger_run_sql(other,
                                 "SELECT 1 / CASE WHEN current_setting('lock_timeout') = '0' "
                                 "THEN 1 ELSE 0 END",
                                 ev.envelopes[2], &err)); /* usable, lock_timeout restored */
    LEDGER_OK(obx_ledger_commit(other, &err));

    cr_assert_eq(helper_mark_done(holder, "projector", &ev.events[0], &held, 1), 1);
    LEDGER_OK(obx_ledger_commit(holder, &err));
    cr_assert_eq(helper_claim_one(other, "projector", &ev.events[0], 30).state, OBX_CLAIM_DONE);
    obx_ledger_close(other);
    obx_ledger_close(holder);
    helper_events_free(&ev);
}

Test(ledger_txn, committing_a_failed_transaction_rolls_it_back_and_says_so)
{
    struct helper_events ev = helper_events_new(conn, 1);
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");
    outbox_error err;

    LEDGER_OK(obx_ledger_begin(ledger, &err));
    (void)helper_claim_one(ledger, "projector", &ev.events[0], 30);
    cr_assert_eq(obx_ledger_run_sql(ledger, "SELECT 1/0", ev.envelopes[0], &err), OUTBOX_EREJECTED);
    cr_assert_eq(obx_ledger_commit(ledger, &err), OUTBOX_EDB);
    cr_assert_str_eq(err.sqlstate, "25P02");
    cr_assert_eq(helper_count(conn, "processed_events", "true"), 0);
    LEDGER_OK(obx_ledger_begin(ledger, &err)); /* the connection is usable again */
    obx_ledger_rollback(ledger);
    obx_ledger_close(ledger);
    helper_events_free(&ev);
}

Test(ledger_txn, handler_statements_need_a_transaction_and_may_ignore_the_envelope)
{
    struct helper_events ev = helper_events_new(conn, 1);
    struct obx_ledger *ledger = helper_ledger_open("ledger-test");
    outbox_error err;

    cr_assert_eq(obx_ledger_run_sql(ledger, insert_effect, ev.envelopes[0], &err), OUTBOX_ENOTXN);
    cr_assert_eq(obx_ledger_savepoint(ledger, &err), OUTBOX_ENOTXN);
    obx_ledger_rollback(ledger); /* safe with no transaction */
    LEDGER_OK(obx_ledger_begin(ledger, &err));
    cr_assert_eq(obx_ledger_begin(ledger, &err), OUTBOX_EINVAL, "no nested begin");
    LEDGER_OK(obx_ledger_run_sql(ledger, "INSERT INTO public.effects DEFAULT VALUES",
                                 ev.envelopes[0], &err));
    LEDGER_OK(obx_ledger_commit(ledger, &err));
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM public.effects"), 1);
    obx_ledger_rollback(ledger);
    obx_ledger_rollback(NULL);
    obx_ledger_close(ledger);
    helper_events_free(&ev);
}

Test(ledger_txn, a_lost_connection_is_unavailable_until_reconnected)
{
    struct helper_events ev = helper_events_new(conn, 1);
    struct obx_ledger *ledger = helper_ledger_open("ledger-lost");
    struct obx_claim claim;
    outbox_error err;

    LEDGER_OK(obx_ledger_begin(ledger, &err));
    claim = helper_claim_one(ledger, "projector", &ev.events[0], 30);
    cr_assert_eq(claim.state, OBX_CLAIM_RUN);
    cr_assert_eq(harness_pg_terminate_backends("ledger-lost"), 1);
    cr_assert_eq(obx_ledger_run_sql(ledger, insert_effect, ev.envelopes[0], &err),
                 OUTBOX_EUNAVAILABLE, "%s", err.message);
    cr_assert_eq(obx_ledger_claim(ledger, "projector", &ev.events[0], 1, 30, 0, &claim, &err),
                 OUTBOX_EUNAVAILABLE);
    obx_ledger_rollback(ledger); /* safe on a broken connection */
    LEDGER_OK(obx_ledger_reconnect(ledger, &err));
    claim = helper_claim_one(ledger, "projector", &ev.events[0], 30);
    cr_assert_eq(claim.state, OBX_CLAIM_RUN, "the lost transaction left no claim");
    obx_ledger_close(ledger);
    helper_events_free(&ev);
}

/*
 * The transactional fast path claims straight as done: only inside a
 * transaction; undone by a rollback; seen as held by a concurrent claimer
 * until commit, then as done; and a claim that had failed before is taken
 * over as done with its attempts kept.
 */
Test(ledger_txn, a_claim_written_as_done_lives_and_dies_with_its_transaction)
{
    struct helper_events ev = helper_events_new(conn, 2);
    struct obx_ledger *ledger = helper_ledger_open("ledger-fast");
    struct obx_ledger *other = helper_ledger_open("ledger-other");
    struct obx_claim got[2], first;
    struct obx_failure_result fr;
    outbox_error err;

    cr_assert_eq(obx_ledger_claim_as_done(ledger, "projector", ev.events, 2, 0, got, &err),
                 OUTBOX_ENOTXN, "outside a transaction the rows would be done before any run");
    cr_assert_eq(helper_count(conn, "processed_events", "true"), 0);

    LEDGER_OK(obx_ledger_begin(ledger, &err));
    LEDGER_OK(obx_ledger_claim_as_done(ledger, "projector", ev.events, 2, 0, got, &err));
    cr_assert(got[0].state == OBX_CLAIM_RUN && got[1].state == OBX_CLAIM_RUN);
    obx_ledger_rollback(ledger);
    cr_assert_eq(helper_count(conn, "processed_events", "true"), 0, "a rollback leaves nothing");

    /* Event 1 failed once before: a claim to run, then a recorded failure. */
    first = helper_claim_one(other, "projector", &ev.events[1], 30);
    fr = helper_fail(other, "projector", &ev.events[1], &first, "broken", 5);
    cr_assert(fr.applied && fr.attempts == 1);
    harness_exec(conn, "UPDATE outbox.processed_events SET next_attempt_at = now()");

    LEDGER_OK(obx_ledger_begin(ledger, &err));
    LEDGER_OK(obx_ledger_claim_as_done(ledger, "projector", ev.events, 2, 200, got, &err));
    cr_assert(got[0].state == OBX_CLAIM_RUN && got[1].state == OBX_CLAIM_RUN);
    cr_assert_eq(got[1].attempts, 1, "the failure before is still counted");
    cr_assert_eq(helper_claim_one(other, "projector", &ev.events[0], 30).state, OBX_CLAIM_BUSY,
                 "an uncommitted claim is held, whatever it is written as");
    LEDGER_OK(obx_ledger_commit(ledger, &err));
    cr_assert_eq(helper_count(conn, "processed_events",
                              "status = 'done' AND finished_at IS NOT NULL AND owner_token IS "
                              "NULL AND claimed_until IS NULL"),
                 2);
    cr_assert_eq(helper_row_ll(conn, "attempts", ev.ids[1], "projector"), 1);
    cr_assert_eq(helper_claim_one(other, "projector", &ev.events[0], 30).state, OBX_CLAIM_DONE);
    obx_ledger_close(other);
    obx_ledger_close(ledger);
    helper_events_free(&ev);
}
