/* SPDX-License-Identifier: MIT */
/*
 * test_consume_lifecycle.c - starting and stopping `outboxd consume`: on
 * SIGTERM a replica stops fetching, finishes the batch in hand and exits
 * within the drain timeout (both backends); one whose stop overruns the
 * drain timeout exits 0 when no handler is running (a broker that went
 * away left nothing in flight) and 1 when a handler is cut short; an
 * existing JetStream consumer
 * with another ack_wait is updated in place, every other setting kept; a
 * stream the consumer has to create gets the configured max age; a ledger
 * retention shorter than the stream's max age is refused with exit code 2.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "aged_rows.h"
#include "consume_nats.h"
#include "consume_test.h"
#include "harness.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define NS_PER_S 1000000000LL

static PGconn *conn;
static char dir[64];

static void
setup(void)
{
    consume_test_suite_begin(&conn, dir);
}

static void
teardown(void)
{
    consume_test_suite_end(&conn, dir);
}

TestSuite(consume_lifecycle, .init = setup, .fini = teardown, .timeout = 150);

static const char *const audit_only[] = {CONSUME_EFFECT("audit"), NULL};

/*
 * SIGTERM arrives while the handlers of the first batch run (to outboxd
 * alone: while the first runs). The batch (5 events, 0.3 s each) is
 * finished and settled; nothing else is fetched; the process exits 0 well
 * within the 10 s drain timeout.
 */
static void
sigterm_finishes_the_batch_in_hand(const char *bus, int whole_group)
{
    enum { EVENTS = 30, BATCH = 5 };
    const char *const handlers[] = {
        "slow=exec:echo \"$OUTBOX_EVENT_ID\" >> \"$CONSUME_DIR/started\"; sleep 0.3; "
        "echo \"$OUTBOX_EVENT_ID\" >> \"$CONSUME_DIR/runs\"",
        NULL,
    };
    struct consume_group g;
    struct harness_proc consumer;
    long long asked_ms, exit_ms;
    int status;

    consume_group_init(&g, bus, "TERM", dir);
    relay_env_set_int(&g.env, "OUTBOX_BATCH_SIZE", BATCH);
    relay_env_set(&g.env, "OUTBOX_DRAIN_TIMEOUT_SECONDS", "10");
    relay_test_enqueue(conn, EVENTS);
    if (g.jetstream) { /* the whole backlog is in the stream before the consumer fetches */
        HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    }
    consume_test_start(&consumer, &g.env, "term-1", handlers);
    /* Outboxd alone: SIGTERM while the batch's first handler runs, and the rest of the
     * batch must still start. The whole group: once every handler of the batch runs
     * (they start side by side, up to the handler's in-flight limit). A child still
     * being spawned is in outboxd's group until posix_spawn moves it to its own, so
     * a group signal in that window ends it before its command runs: an event
     * retried later with no attempt spent, not a handler cut short. */
    HARNESS_WAIT_UNTIL(consume_test_lines(dir, "started", "") >= (whole_group ? BATCH : 1), 30000);
    asked_ms = harness_now_ms();
    if (whole_group) {
        /* Ctrl-C or systemd: every process of outboxd's group. Handlers run in their own
         * process group, so the ones running finish and are marked done. */
        harness_proc_signal(&consumer, SIGTERM);
    } else {
        kill(consumer.pid, SIGTERM); /* outboxd alone, as `docker stop` does */
    }
    status = harness_proc_wait(&consumer, 15000);
    exit_ms = harness_now_ms() - asked_ms;
    cr_log_info("%s: exited with %d %lld ms after SIGTERM", bus, status, exit_ms);
    cr_assert_eq(status, 0, "exit status %d:\n%s", status, consume_test_log_tail(&consumer, 3000));
    cr_assert_lt(exit_ms, 10000, "took %lld ms for a 10 s drain timeout", exit_ms);

    /* The batch in hand was finished, and nothing after it was started. */
    cr_assert_eq(consume_test_lines(dir, "started", ""), BATCH);
    cr_assert_eq(consume_test_lines(dir, "runs", ""), BATCH);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.processed_events "
                                         "WHERE status = 'done'"),
                 BATCH);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.processed_events "
                                         "WHERE status <> 'done'"),
                 0, "a claim was left behind");
    if (g.jetstream) {
        struct consume_nats_state st = consume_test_nats_state(g.stream, g.consumer);

        cr_assert_eq(st.num_ack_pending, 0, "the batch was not settled before exiting");
        cr_assert_eq(st.num_pending, EVENTS - BATCH, "it fetched after SIGTERM");
    } else {
        cr_assert_eq(relay_test_count(conn, "status = 'done'"), BATCH);
        cr_assert_eq(relay_test_count(conn, "status = 'pending'"), EVENTS - BATCH,
                     "it leased after SIGTERM, or left rows leased");
    }
    consume_group_fini(&g);
}

Test(consume_lifecycle, sigterm_stops_fetching_and_finishes_the_batch_in_hand_on_jetstream)
{
    sigterm_finishes_the_batch_in_hand("jetstream", 0);
}

Test(consume_lifecycle, sigterm_stops_fetching_and_finishes_the_batch_in_hand_on_the_db_backend)
{
    sigterm_finishes_the_batch_in_hand("db", 0);
}

/* SIGTERM to a consumer with `handlers` once `started` has a line; its exit status. */
static int
overrun_drain(struct consume_group *g, const char *const handlers[], struct harness_proc *consumer)
{
    long long asked_ms;
    int status;

    relay_env_set(&g->env, "OUTBOX_DRAIN_TIMEOUT_SECONDS", "2");
    relay_test_enqueue(conn, 1);
    consume_test_start(consumer, &g->env, "overrun-1", handlers);
    HARNESS_WAIT_UNTIL(consume_test_lines(dir, "started", "") >= 1, 30000);
    asked_ms = harness_now_ms();
    kill(consumer->pid, SIGTERM);
    status = harness_proc_wait(consumer, 15000);
    cr_assert_lt(harness_now_ms() - asked_ms, 8000, "a 2 s drain timeout took %lld ms",
                 harness_now_ms() - asked_ms);
    return status;
}

/*
 * Closing overruns the drain timeout after every handler finished, as a
 * close to a broker that stopped answering can (the stall is a test hook):
 * nothing is cut short, so the replica exits 0 and says why.
 */
Test(consume_lifecycle, a_stop_that_overruns_with_nothing_in_flight_exits_0)
{
    const char *const handlers[] = {
        "quick=exec:echo \"$OUTBOX_EVENT_ID\" >> \"$CONSUME_DIR/started\"", NULL};
    struct consume_group g;
    struct harness_proc consumer;
    int status;

    consume_group_init(&g, "jetstream", "OVRN", dir);
    relay_env_set(&g.env, "OUTBOX_TEST_STALL_ON_STOP_MS", "20000");
    status = overrun_drain(&g, handlers, &consumer);
    cr_assert_eq(status, 0, "exit status %d:\n%s", status, consume_test_log_tail(&consumer, 3000));
    cr_assert(harness_proc_log_contains(&consumer, "stalling on stop on purpose"),
              "the hook did not stall the stop:\n%s", consume_test_log_tail(&consumer, 3000));
    cr_assert(harness_proc_log_contains(&consumer, "drain timeout exceeded with nothing in flight"),
              "%s", consume_test_log_tail(&consumer, 3000));
    consume_group_fini(&g);
}

/* A handler still running at the drain timeout is cut short: exit 1, as before. */
Test(consume_lifecycle, a_stop_that_overruns_while_a_handler_runs_exits_1)
{
    const char *const handlers[] = {
        "slow=exec:echo \"$OUTBOX_EVENT_ID\" >> \"$CONSUME_DIR/started\"; sleep 20", NULL};
    struct consume_group g;
    struct harness_proc consumer;
    int status;

    consume_group_init(&g, "jetstream", "OVRB", dir);
    relay_env_set(&g.env, "OUTBOX_HANDLER_TIMEOUT_SECONDS", "60");
    relay_env_set(&g.env, "OUTBOX_LEDGER_LEASE_SECONDS", "120");
    status = overrun_drain(&g, handlers, &consumer);
    cr_assert_eq(status, 1, "exit status %d:\n%s", status, consume_test_log_tail(&consumer, 3000));
    cr_assert(harness_proc_log_contains(&consumer, "drain timeout exceeded, exiting"), "%s",
              consume_test_log_tail(&consumer, 3000));
    consume_group_fini(&g);
}

Test(consume_lifecycle, a_sigterm_to_the_whole_process_group_lets_running_handlers_finish)
{
    sigterm_finishes_the_batch_in_hand("db", 1);
}

Test(consume_lifecycle, an_existing_consumer_with_another_ack_wait_is_updated_in_place)
{
    struct consume_group g;
    struct consume_nats_state before, after;
    struct harness_proc consumer;
    char filter[64], err[512] = "";

    consume_group_init(&g, "jetstream", "ACKW", NULL);
    snprintf(filter, sizeof(filter), "%s.>", g.prefix);
    cr_assert_eq(consume_nats_create_stream(harness_nats_url(), g.stream, g.prefix, 7 * 86400, err,
                                            sizeof(err)),
                 0, "%s", err);
    cr_assert_eq(consume_nats_create_consumer(harness_nats_url(), g.stream, g.consumer, filter, 30,
                                              "sized by hand", 5000, err, sizeof(err)),
                 0, "%s", err);
    before = consume_test_nats_state(g.stream, g.consumer);
    relay_test_enqueue(conn, 50);
    consume_test_start(&consumer, &g.env, "ackw-1", audit_only);
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&consumer, "field=ack_wait"), 20000);
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "audit") == 50 &&
                           consume_test_nats_drained(g.stream, g.consumer),
                       30000);
    consume_test_stop(&consumer, 10000);

    after = consume_test_nats_state(g.stream, g.consumer);
    cr_assert(harness_proc_log_contains(&consumer, "consumer updated"), "no update was logged:\n%s",
              harness_proc_log(&consumer));
    cr_assert_eq(before.ack_wait_ns, 30 * NS_PER_S);
    cr_assert_eq(after.ack_wait_ns, 2 * NS_PER_S, "ack_wait was not updated");
    cr_assert_eq(after.created_ns, before.created_ns, "the consumer was recreated, not updated");
    cr_assert_str_eq(after.description, "sized by hand");
    cr_assert_eq(after.max_ack_pending, 5000, "max_ack_pending was not kept");
    consume_test_expect_exactly_once(conn, "audit");
    consume_group_fini(&g);
}

Test(consume_lifecycle, a_stream_the_consumer_creates_gets_the_configured_max_age)
{
    struct relay_env env;
    struct harness_proc consumer;
    int64_t max_age = 0;
    char err[512] = "";

    consume_test_env(&env, "jetstream", "C_MAXAGE", "cmaxage", "G_MAXAGE");
    relay_env_set(&env, "OUTBOX_STREAM_MAX_AGE_SECONDS", "172800");
    relay_env_set(&env, "OUTBOX_LEDGER_RETENTION_DAYS", "3");
    consume_test_start(&consumer, &env, "maxage-1", audit_only);
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&consumer, "feed ready"), 20000);
    consume_test_stop(&consumer, 10000);
    cr_assert_eq(
        consume_nats_stream_max_age(harness_nats_url(), "C_MAXAGE", &max_age, err, sizeof(err)), 0,
        "%s", err);
    cr_assert_eq(max_age, 172800, "the consumer created the stream with max_age %lld s",
                 (long long)max_age);
    relay_env_fini(&env);
}

Test(consume_lifecycle, a_ledger_retention_shorter_than_the_streams_max_age_is_refused_with_exit_2)
{
    struct relay_env env;
    struct harness_proc refused, accepted;
    struct consume_nats_state st;
    char err[512] = "";
    int status;

    consume_test_env(&env, "jetstream", "C_RETAIN", "cretain", "G_RETAIN");
    relay_env_set(&env, "OUTBOX_STREAM_MAX_AGE_SECONDS", "172800");
    relay_env_set(&env, "OUTBOX_LEDGER_RETENTION_DAYS", "1");
    consume_test_start(&refused, &env, "retain-1", audit_only);
    status = harness_proc_wait(&refused, 20000);
    cr_assert_eq(status, 2, "exit status %d:\n%s", status, harness_proc_log(&refused));
    cr_assert(harness_proc_log_contains(&refused, "ledger retention 86400 s is shorter than the "
                                                  "stream's max age 172800 s"),
              "no clear message:\n%s", harness_proc_log(&refused));
    cr_assert_neq(
        consume_nats_state_read(harness_nats_url(), "C_RETAIN", "G_RETAIN", &st, err, sizeof(err)),
        0, "a refused consumer created its durable consumer anyway");

    /* Exactly the max age is enough. */
    relay_env_set(&env, "OUTBOX_LEDGER_RETENTION_DAYS", "2");
    consume_test_start(&accepted, &env, "retain-2", audit_only);
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&accepted, "feed ready"), 20000);
    consume_test_stop(&accepted, 10000);
    relay_env_fini(&env);
}

/*
 * Retention keeps up with a large backlog: 30,000 ledger rows finished 40
 * days ago (OUTBOX_LEDGER_RETENTION_DAYS is 30) and, with no relay, 30,000
 * outbox rows handled two hours ago (OUTBOX_RETENTION_HOURS 1) go within
 * 20 s, on the consumer's upkeep session. Between batches on the ledger's
 * session a pass was held to 20,000 rows every 5 minutes: 67 rows a second,
 * less than one handler's ledger rows at 100 events a second.
 */
Test(consume_lifecycle, retention_keeps_up_with_a_large_backlog_of_old_rows)
{
    const char *const handlers[] = {"noop=sql:SELECT 1", NULL};
    struct consume_group g;
    struct harness_proc consumer;

    relay_test_enqueue(conn, 30000);
    aged_rows_from_pending(conn, "done");
    harness_exec(conn,
                 "INSERT INTO outbox.processed_events (event_id, handler, status, "
                 "started_at, finished_at) SELECT outbox.uuid_v7(now() - interval '40 days'), "
                 "'noop', 'done', now() - interval '40 days', now() - interval '40 days' "
                 "FROM generate_series(1, 30000)");
    consume_group_init(&g, "db", "RETAIN", NULL);
    relay_env_set(&g.env, "OUTBOX_RETENTION_HOURS", "1");
    consume_test_start(&consumer, &g.env, "retain-1", handlers);
    HARNESS_WAIT_UNTIL(relay_test_count(conn, "true") == 0 &&
                           harness_scalar_ll(conn,
                                             "SELECT count(*) FROM outbox.processed_events "
                                             "WHERE finished_at < now() - interval '30 days'") == 0,
                       20000);
    consume_test_stop(&consumer, 10000);
    consume_group_fini(&g);
}

/*
 * With no relay (OUTBOX_BUS=db, mark mode) the consumers remove handled
 * rows once they are older than OUTBOX_RETENTION_HOURS, and nothing else.
 */
Test(consume_lifecycle, the_db_backend_prunes_handled_rows_after_the_retention)
{
    const char *const handlers[] = {"noop=sql:SELECT 1", NULL};
    struct consume_group g;
    struct harness_proc consumer;

    /* 10 handled two hours ago, 10 handled just now, 10 still to handle. */
    relay_test_enqueue(conn, 10);
    aged_rows_from_pending(conn, "done");
    relay_test_enqueue(conn, 20);
    harness_exec(conn, "UPDATE outbox.events SET status = 'done', published_at = now() "
                       "WHERE id IN (SELECT id FROM outbox.events WHERE status = 'pending' "
                       "ORDER BY id LIMIT 10)");
    harness_exec(conn, "CREATE TABLE recent AS SELECT id FROM outbox.events "
                       "WHERE status = 'done' AND published_at > now() - interval '1 hour'");
    consume_group_init(&g, "db", "PRUNE", NULL);
    relay_env_set(&g.env, "OUTBOX_RETENTION_HOURS", "1");
    consume_test_start(&consumer, &g.env, "prune-1", handlers);
    HARNESS_WAIT_UNTIL(relay_test_count(conn, "published_at < now() - interval '1 hour'") == 0,
                       30000);
    HARNESS_WAIT_UNTIL(relay_test_count(conn, "status = 'pending'") == 0, 30000);
    consume_test_stop(&consumer, 10000);
    cr_assert_eq(relay_test_count(conn, "true"), 20, "only the old handled rows are gone");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM recent JOIN outbox.events "
                                         "USING (id)"),
                 10, "a row handled within the retention was removed");
    consume_group_fini(&g);
}
