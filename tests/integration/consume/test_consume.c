/* SPDX-License-Identifier: MIT */
/*
 * test_consume.c - `outboxd consume` replicas run each declared handler
 * exactly once per event, on both backends, however often the event comes
 * back: four JetStream replicas while the stream holds every event three
 * times (republished under new message ids) and one replica freezes past
 * its ack wait; four DB replicas while the test keeps expiring their
 * leases and sends handled rows round again; a republish after the fact.
 * The DB backend finishes a row only once every handler bound to it is
 * done. Effects are counted in a table without a unique constraint.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "consume_nats.h"
#include "consume_test.h"
#include "harness.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { REPLICAS = 4 };

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

TestSuite(consume, .init = setup, .fini = teardown, .timeout = 150);

static const char *const two_effects[] = {CONSUME_EFFECT("audit"), CONSUME_EFFECT("mailer"), NULL};

static void
start_replicas(struct harness_proc *p, struct relay_env *env, const char *tag,
               const char *const handlers[])
{
    for (int i = 0; i < REPLICAS; i++) {
        char name[48];

        snprintf(name, sizeof(name), "%s-%d", tag, i + 1);
        consume_test_start(&p[i], env, name, handlers);
    }
}

static void
stop_replicas(struct harness_proc *p)
{
    for (int i = 0; i < REPLICAS; i++) {
        consume_test_assert_running(&p[i], "a consumer replica");
        consume_test_stop(&p[i], 10000);
    }
}

/* Publishes what was committed and waits until the relay has finished every row. */
static void
relay_everything(struct relay_env *renv, const char *name)
{
    struct harness_proc relay;

    relay_test_start(&relay, renv, name);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    relay_test_stop(&relay, 10000);
}

static int
both_handled(long long events)
{
    return consume_test_handled(conn, "audit") == events &&
           consume_test_handled(conn, "mailer") == events;
}

Test(consume, four_jetstream_replicas_run_each_handler_once_while_every_event_comes_three_times)
{
    enum { EVENTS = 1000 };
    struct harness_proc replicas[REPLICAS];
    struct relay_env renv, cenv;
    struct consume_nats_state st;
    size_t copies = 0, more = 0;
    uint64_t last = 0;
    char err[512] = "";

    relay_test_env(&renv, "CONS_JS", "consjs");
    consume_test_env(&cenv, "jetstream", "CONS_JS", "consjs", "G_JS");
    relay_test_enqueue(conn, EVENTS);
    relay_everything(&renv, "consjs-relay");
    start_replicas(replicas, &cenv, "consjs", two_effects);

    /* The same envelopes twice more under new message ids, while the replicas consume. */
    cr_assert_eq(consume_nats_republish(harness_nats_url(), "CONS_JS", 1, EVENTS, 1, &copies, err,
                                        sizeof(err)),
                 0, "%s", err);
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "audit") >= EVENTS / 4, 60000);
    /* One replica freezes past its ack wait: what it holds is redelivered to the others. */
    harness_proc_signal(&replicas[0], SIGSTOP);
    cr_assert_eq(consume_nats_republish(harness_nats_url(), "CONS_JS", 1, EVENTS, 2, &more, err,
                                        sizeof(err)),
                 0, "%s", err);
    /* Not waiting for a condition: the freeze outlasts the 2 s ack wait. */
    harness_sleep_ms(3000);
    harness_proc_signal(&replicas[0], SIGCONT);

    HARNESS_WAIT_UNTIL(both_handled(EVENTS) && consume_test_nats_drained("CONS_JS", "G_JS"), 90000);
    stop_replicas(replicas);
    cr_assert_eq(consume_nats_last_seq(harness_nats_url(), "CONS_JS", &last, err, sizeof(err)), 0,
                 "%s", err);
    st = consume_test_nats_state("CONS_JS", "G_JS");
    cr_log_info("stream holds %llu messages for %d events; the group acked up to %llu after "
                "%llu deliveries",
                (unsigned long long)last, EVENTS, (unsigned long long)st.ack_floor_stream_seq,
                (unsigned long long)st.delivered_consumer_seq);
    cr_assert_eq(copies + more, 2 * EVENTS);
    cr_assert_eq(last, 3 * EVENTS, "every event must be in the stream three times");
    consume_test_expect_exactly_once(conn, "audit");
    consume_test_expect_exactly_once(conn, "mailer");
    consume_test_expect_nothing_spent(conn);
    relay_env_fini(&cenv);
    relay_env_fini(&renv);
}

/*
 * The DB backend's redeliveries, forced: every lease is made to run out
 * once as soon as it is taken (another replica may lease the row while
 * its holder still works on it), and every handled row is sent round
 * again once, as if it had never been consumed.
 */
static long long
expire_and_resend(void)
{
    /* Rows a replica is writing are skipped, not waited for: waiting on
     * them while the replica's statement waits on ours is a deadlock. They
     * are taken on a later round. */
    long long expired = harness_scalar_ll(
        conn, "WITH pick AS (SELECT id FROM outbox.events WHERE status = 'leased' "
              "AND lease_expiries = 0 AND leased_until > now() FOR UPDATE SKIP LOCKED), "
              "x AS (UPDATE outbox.events e SET leased_until = now() - interval '1 second' "
              "FROM pick WHERE e.id = pick.id RETURNING 1) SELECT count(*) FROM x");

    harness_exec(conn,
                 "WITH pick AS (SELECT id FROM outbox.events e WHERE e.status = 'done' "
                 "AND NOT EXISTS (SELECT 1 FROM public.resent r WHERE r.id = e.id) "
                 "LIMIT 100 FOR UPDATE OF e SKIP LOCKED), "
                 "again AS (INSERT INTO public.resent SELECT id FROM pick RETURNING id) "
                 "UPDATE outbox.events e SET status = 'pending', published_at = NULL, "
                 "next_attempt_at = now(), lease_expiries = 0 FROM again WHERE e.id = again.id");
    return expired;
}

/* Batches settled, across the replicas' logs, by a replica that had lost their lease. */
static size_t
lost_in_logs(struct harness_proc *replicas)
{
    size_t lost = 0;

    for (int i = 0; i < REPLICAS; i++) {
        char *log = harness_proc_log(&replicas[i]);

        lost += text_count(log, "lease lost before settle");
        free(log);
    }
    return lost;
}

Test(consume, four_db_replicas_run_each_handler_once_while_leases_run_out_and_rows_come_back)
{
    enum { EVENTS = 1000 };
    /* A few milliseconds per event keep batches in hand long enough to be taken over. */
    const char *const handlers[] = {CONSUME_EFFECT("audit"), CONSUME_EFFECT("mailer"),
                                    "pace=sql:SELECT pg_sleep(0.002)", NULL};
    struct harness_proc replicas[REPLICAS];
    struct relay_env cenv;
    long long expired = 0, events = 0;
    size_t lost = 0;

    harness_exec(conn, "CREATE TABLE public.resent (id uuid PRIMARY KEY)");
    consume_test_env(&cenv, "db", "CONS_DB", "consdb", "G_DB");
    relay_env_set(&cenv, "OUTBOX_BATCH_SIZE", "10");
    relay_test_enqueue(conn, EVENTS);
    events = EVENTS;
    start_replicas(replicas, &cenv, "consdb", handlers);
    /* A takeover from a working replica is a race the test provokes, not one it can force:
     * on a slow machine (the daemons under ThreadSanitizer) a round may see none, so up to
     * three rounds of fresh events are run until one has been seen. */
    for (int round = 0; round < 3 && lost == 0; round++) {
        if (round > 0) {
            relay_test_enqueue(conn, EVENTS);
            events += EVENTS;
        }
        while (harness_scalar_ll(conn, "SELECT count(*) FROM public.resent") < events) {
            expired += expire_and_resend();
            consume_test_assert_running(&replicas[0], "a consumer replica");
            harness_sleep_ms(5);
        }
        HARNESS_WAIT_UNTIL(both_handled(events) && relay_test_count(conn, "status <> 'done'") == 0,
                           90000);
        lost = lost_in_logs(replicas);
    }
    stop_replicas(replicas);
    lost = lost_in_logs(replicas);
    cr_log_info("%lld leases were made to run out, %zu batches were settled by a replica that "
                "had lost their lease; every one of %lld rows was delivered again after it was "
                "handled",
                expired, lost, events);
    cr_assert_gt(lost, 0, "no lease was taken over from a working replica: nothing was proved");
    consume_test_expect_exactly_once(conn, "audit");
    consume_test_expect_exactly_once(conn, "mailer");
    consume_test_expect_nothing_spent(conn);
    relay_env_fini(&cenv);
}

Test(consume, an_event_republished_under_a_new_message_id_runs_no_handler_again)
{
    enum { EVENTS = 100 };
    struct harness_proc consumer;
    struct relay_env renv, cenv;
    size_t copies = 0;
    uint64_t last = 0;
    char err[512] = "";

    relay_test_env(&renv, "CONS_REPUB", "consrepub");
    consume_test_env(&cenv, "jetstream", "CONS_REPUB", "consrepub", "G_REPUB");
    relay_test_enqueue(conn, EVENTS);
    relay_everything(&renv, "consrepub-relay");
    consume_test_start(&consumer, &cenv, "consrepub-1", two_effects);
    HARNESS_WAIT_UNTIL(both_handled(EVENTS) && consume_test_nats_drained("CONS_REPUB", "G_REPUB"),
                       30000);
    harness_exec(conn, "CREATE TABLE before AS SELECT * FROM outbox.processed_events");

    /* The same bodies under new Nats-Msg-Ids: the broker's dedup window cannot catch them. */
    cr_assert_eq(consume_nats_republish(harness_nats_url(), "CONS_REPUB", 1, EVENTS, 1, &copies,
                                        err, sizeof(err)),
                 0, "%s", err);
    cr_assert_eq(copies, EVENTS);
    cr_assert_eq(consume_nats_last_seq(harness_nats_url(), "CONS_REPUB", &last, err, sizeof(err)),
                 0, "%s", err);
    cr_assert_eq(last, 2 * EVENTS, "the broker deduplicated the new message ids");
    HARNESS_WAIT_UNTIL(consume_test_nats_drained("CONS_REPUB", "G_REPUB"), 30000);
    consume_test_stop(&consumer, 10000);

    consume_test_expect_exactly_once(conn, "audit");
    consume_test_expect_exactly_once(conn, "mailer");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM (SELECT * FROM "
                                         "outbox.processed_events EXCEPT SELECT * FROM before) c"),
                 0, "the replayed messages changed ledger rows");
    relay_env_fini(&cenv);
    relay_env_fini(&renv);
}

Test(consume, the_db_backend_finishes_a_row_only_after_every_handler_bound_to_it_is_done)
{
    enum { EVENTS = 200 };
    const char *const handlers[] = {
        CONSUME_EFFECT("audit"),
        /* Retry later (75, no attempt spent) until the test opens the gate. */
        "gate=exec:[ -e \"$CONSUME_DIR/open\" ] || exit 75",
        /* Bound to other events only: it must not hold these rows back. */
        "other@consgate.movie.never.seen=sql:SELECT 1/0",
        NULL,
    };
    struct harness_proc consumer;
    struct relay_env cenv;

    /* A row turning done before both of its handlers are done in the ledger is recorded. */
    harness_exec(conn, "CREATE TABLE public.early_done (id uuid, handlers_done bigint)");
    harness_exec(conn, "CREATE FUNCTION public.check_done() RETURNS trigger LANGUAGE plpgsql AS "
                       "$$DECLARE n bigint; BEGIN SELECT count(*) INTO n FROM "
                       "outbox.processed_events p WHERE p.event_id = NEW.id AND p.status = "
                       "'done'; IF n < 2 THEN INSERT INTO public.early_done VALUES (NEW.id, n); "
                       "END IF; RETURN NEW; END$$");
    harness_exec(conn, "CREATE TRIGGER check_done BEFORE UPDATE ON outbox.events FOR EACH ROW "
                       "WHEN (NEW.status = 'done' AND OLD.status <> 'done') "
                       "EXECUTE FUNCTION public.check_done()");
    consume_test_env(&cenv, "db", "CONS_GATE", "consgate", "G_GATE");
    relay_env_set(&cenv, "CONSUME_DIR", dir);
    relay_env_set(&cenv, "OUTBOX_MAX_ATTEMPTS", "1"); /* a spent attempt would dead-letter */
    relay_test_enqueue(conn, EVENTS);
    consume_test_start(&consumer, &cenv, "consgate-1", handlers);

    /* audit is done for every event, and the gate has said "later" for each of them. */
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "audit") == EVENTS &&
                           harness_scalar_ll(conn, "SELECT count(DISTINCT event_id) FROM "
                                                   "public.ledger_log WHERE handler = 'gate' "
                                                   "AND next_attempt_at IS NOT NULL") == EVENTS,
                       60000);
    cr_assert_eq(relay_test_count(conn, "status = 'done'"), 0,
                 "rows finished while the gate handler was not done");
    consume_test_touch(dir, "open");
    HARNESS_WAIT_UNTIL(relay_test_count(conn, "status = 'done'") == EVENTS, 60000);
    consume_test_stop(&consumer, 10000);

    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM public.early_done"), 0,
                 "rows turned done before both handlers were done");
    consume_test_expect_exactly_once(conn, "audit");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.processed_events "
                                         "WHERE handler = 'gate' AND status = 'done'"),
                 EVENTS);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.processed_events "
                                         "WHERE handler = 'other'"),
                 0, "a handler ran for events it is not bound to");
    consume_test_expect_nothing_spent(conn);
    relay_env_fini(&cenv);
}
