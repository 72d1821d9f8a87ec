/* SPDX-License-Identifier: MIT */
/*
 * test_consume_failures.c - what `outboxd consume` does when handlers do
 * not simply succeed, on both backends: failures are retried on the
 * backoff schedule (checked in database time, from a trigger log of every
 * ledger write) and dead-lettered exactly at OUTBOX_MAX_ATTEMPTS, with the
 * message terminated (JetStream) or the row finished (DB); exit 75 from an
 * exec: handler and a claim held by another ledger spend no attempt; and
 * an exec: worker frozen past its claim's lease while another replica
 * takes over changes no ledger row when it resumes (FAULTS.md T08); a SQL
 * handler's own lock timeout spends attempts like any failure.
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

TestSuite(consume_failures, .init = setup, .fini = teardown, .timeout = 150);

/* Commits one event of `event_type` whose payload says how often it must fail; its id. */
static char *
enqueue_one(const char *event_type, int fail_times)
{
    char sql[512];

    snprintf(sql, sizeof(sql),
             "WITH e AS (INSERT INTO public.committed SELECT outbox.enqueue('movie', "
             "gen_random_uuid(), '%s', jsonb_build_object('fail', %d)) RETURNING id) "
             "SELECT id::text FROM e",
             event_type, fail_times);
    return harness_scalar_text(conn, sql);
}

/* A number about one event: `sql` takes its id as $1. */
static long long
about(const char *sql, const char *event_id)
{
    return consume_test_ll(conn, sql, event_id);
}

/*
 * Retry k of `event_id` (k = 1, 2, ...) in database time: the delay the
 * failure planned (next_attempt_at - now() of its transaction) must be
 * base * 2^(k-1) +-10 %, and the next claim must come after it was due
 * and not much later.
 */
static void
expect_retry_on_schedule(const char *handler, const char *event_id, int k, int base_ms)
{
    char sql[1200];
    long long expected_ms = (long long)base_ms << (k - 1);
    long long planned_ms, late_ms;

    snprintf(sql, sizeof(sql),
             "SELECT round(extract(epoch FROM next_attempt_at - tx_now) * 1000)::bigint "
             "FROM public.ledger_log WHERE handler = '%s' AND event_id = '%s' "
             "AND attempts = %d AND owner_token IS NULL ORDER BY seq LIMIT 1",
             handler, event_id, k);
    planned_ms = harness_scalar_ll(conn, sql);
    snprintf(sql, sizeof(sql),
             "SELECT round(extract(epoch FROM c.at - f.next_attempt_at) * 1000)::bigint "
             "FROM public.ledger_log f, LATERAL (SELECT at FROM public.ledger_log c "
             "WHERE c.handler = f.handler AND c.event_id = f.event_id AND c.seq > f.seq "
             /* The next claim: to run (a token), or straight to done (the fast path). */
             "AND (c.owner_token IS NOT NULL OR (c.status = 'done' AND c.old_owner_token IS NULL)) "
             "ORDER BY c.seq LIMIT 1) c "
             "WHERE f.handler = '%s' AND f.event_id = '%s' AND f.attempts = %d "
             "AND f.owner_token IS NULL ORDER BY f.seq LIMIT 1",
             handler, event_id, k);
    late_ms = harness_scalar_ll(conn, sql);
    cr_log_info("%s retry %d: planned %lld ms (expected %lld +-10 %%), ran %lld ms after due",
                handler, k, planned_ms, expected_ms, late_ms);
    cr_assert(planned_ms >= expected_ms * 9 / 10 && planned_ms <= expected_ms * 11 / 10 + 5,
              "retry %d of %s planned %lld ms, not %lld +-10 %%", k, handler, planned_ms,
              expected_ms);
    cr_assert(late_ms >= 0 && late_ms <= 1000, "retry %d of %s ran %lld ms after it was due", k,
              handler, late_ms);
}

/* The group terminated one message, as the server reports it: the dead event's. */
static void
expect_terminated_exactly(struct consume_nats_terms *terms, const struct consume_group *g,
                          const char *event_id)
{
    uint64_t seqs[8];
    char id[64], err[512] = "";
    int n = consume_nats_terms_take(terms, 2000, seqs, 8);

    cr_assert_eq(n, 1, "%d messages were terminated, not the dead one alone", n);
    cr_assert_eq(consume_nats_msg_id(harness_nats_url(), g->stream, seqs[0], id, sizeof(id), err,
                                     sizeof(err)),
                 0, "%s", err);
    cr_assert_str_eq(id, event_id, "the terminated message is not the dead event");
}

static void
failures_are_retried_on_schedule_and_dead_lettered_at_max_attempts(const char *bus)
{
    enum { MAX_ATTEMPTS = 4, BASE_MS = 1000 };
    struct consume_group g;
    struct consume_nats_terms terms = {0};
    struct harness_proc consumer;
    char flaky[200], hook[512], needle[160], err[512] = "";
    char *ok_id, *twice_id, *dead_id, *hooked_id;

    consume_group_init(&g, bus, "SCHED", dir);
    /* Raises until its own ledger row has counted `fail` failures. */
    harness_exec(conn, "CREATE FUNCTION public.flaky(env jsonb) RETURNS void LANGUAGE plpgsql AS "
                       "$$DECLARE tries integer; BEGIN SELECT attempts INTO tries FROM "
                       "outbox.processed_events WHERE event_id = (env->>'id')::uuid AND "
                       "handler = 'flaky'; IF coalesce(tries, 0) < (env->'payload'->>'fail')"
                       "::integer THEN RAISE EXCEPTION 'flaky still broken after % tries', "
                       "tries; END IF; INSERT INTO public.effects (event_id, handler) VALUES "
                       "((env->>'id')::uuid, 'flaky'); END$$");
    snprintf(flaky, sizeof(flaky), "flaky@%s.movie.review.logged=sql:SELECT public.flaky($1)",
             g.prefix);
    /*
     * Fails until its counter file for the event has three lines: two attempts
     * spent. Its first run takes 1.5 s, after flaky's first failures in the
     * same batch: their retries must still come 1 s after they failed, not
     * 1 s after the batch ends.
     */
    snprintf(hook, sizeof(hook),
             "hook@%s.movie.hooked=exec:f=\"$CONSUME_DIR/$OUTBOX_EVENT_ID\"; "
             "[ \"$OUTBOX_ATTEMPTS\" != 0 ] || sleep 1.5; "
             "echo \"$OUTBOX_ATTEMPTS\" >> \"$f\"; "
             "[ \"$(wc -l < \"$f\")\" -ge 3 ] || { echo \"hook not ready\" >&2; exit 1; }",
             g.prefix);
    relay_env_set_int(&g.env, "OUTBOX_MAX_ATTEMPTS", MAX_ATTEMPTS);
    relay_env_set_int(&g.env, "OUTBOX_BACKOFF_BASE_MS", BASE_MS);
    relay_env_set(&g.env, "OUTBOX_BACKOFF_CAP_MS", "60000");
    if (g.jetstream) {
        cr_assert_eq(consume_nats_terms_watch(&terms, harness_nats_url(), g.stream, g.consumer, err,
                                              sizeof(err)),
                     0, "%s", err);
    }
    ok_id = enqueue_one("review.logged", 0);
    twice_id = enqueue_one("review.logged", 2);
    dead_id = enqueue_one("review.logged", 99);
    hooked_id = enqueue_one("hooked", 0);
    consume_test_start(&consumer, &g.env, "sched-1", (const char *const[]){flaky, hook, NULL});

    snprintf(needle, sizeof(needle), "event exhausted max deliveries event_id=%s handler=flaky",
             dead_id);
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&consumer, needle), 30000);
    HARNESS_WAIT_UNTIL(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.processed_events "
                                               "WHERE status = 'done'") == 3,
                       30000);
    if (g.jetstream) {
        HARNESS_WAIT_UNTIL(consume_test_nats_drained(g.stream, g.consumer), 30000);
    } else {
        HARNESS_WAIT_UNTIL(relay_test_count(conn, "status = 'done'") == 4, 30000);
    }
    consume_test_stop(&consumer, 10000);

    /* Succeeded at once: no attempt. Failed twice: retried after 1 s and 2 s, done at the third. */
    cr_assert_eq(about("SELECT attempts FROM outbox.processed_events WHERE event_id = $1::uuid "
                       "AND status = 'done'",
                       ok_id),
                 0);
    cr_assert_eq(about("SELECT attempts FROM outbox.processed_events WHERE event_id = $1::uuid "
                       "AND status = 'done'",
                       twice_id),
                 2);
    expect_retry_on_schedule("flaky", twice_id, 1, BASE_MS);
    expect_retry_on_schedule("flaky", twice_id, 2, BASE_MS);
    cr_assert_eq(about("SELECT count(*) FROM public.effects WHERE event_id = $1::uuid", twice_id),
                 1);

    /* Always failing: retried after 1, 2 and 4 s, dead exactly at the fourth failure. */
    for (int k = 1; k < MAX_ATTEMPTS; k++) {
        expect_retry_on_schedule("flaky", dead_id, k, BASE_MS);
    }
    cr_assert_eq(about("SELECT count(*) FROM public.ledger_log WHERE event_id = $1::uuid "
                       "AND owner_token IS NOT NULL",
                       dead_id),
                 MAX_ATTEMPTS, "the handler must run exactly max attempts times");
    cr_assert_eq(about("SELECT count(*) FROM outbox.processed_events WHERE event_id = $1::uuid "
                       "AND attempts = 4 AND dead_at IS NOT NULL AND owner_token IS NULL",
                       dead_id),
                 1);
    cr_assert_eq(about("SELECT count(*) FROM outbox.dead_letters d JOIN outbox.events e "
                       "ON e.id = d.event_id WHERE d.event_id = $1::uuid AND d.handler = 'flaky' "
                       "AND d.attempts = 4 AND d.envelope = e.envelope "
                       "AND d.reason LIKE '%flaky still broken after 3 tries%'",
                       dead_id),
                 1, "the dead letter must name the handler and carry the reason and envelope");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters"), 1);
    cr_assert_eq(about("SELECT count(*) FROM public.effects WHERE event_id = $1::uuid", dead_id),
                 0);
    if (g.jetstream) {
        expect_terminated_exactly(&terms, &g, dead_id);
        consume_nats_terms_close(&terms);
    } else {
        cr_assert_eq(about("SELECT count(*) FROM outbox.events WHERE id = $1::uuid AND status = "
                           "'done'",
                           dead_id),
                     1, "the dead event's row must be finished");
    }

    /* The exec handler ran three times, told 0, 1 and 2 attempts, and is done with 2. */
    cr_assert_eq(consume_test_lines(dir, hooked_id, ""), 3);
    cr_assert_eq(consume_test_lines(dir, hooked_id, "0"), 1);
    cr_assert_eq(consume_test_lines(dir, hooked_id, "1"), 1);
    cr_assert_eq(consume_test_lines(dir, hooked_id, "2"), 1);
    cr_assert_eq(about("SELECT count(*) FROM outbox.processed_events WHERE event_id = $1::uuid "
                       "AND handler = 'hook' AND status = 'done' AND attempts = 2 "
                       "AND last_error LIKE '%exited with 1: hook not ready%'",
                       hooked_id),
                 1);
    expect_retry_on_schedule("hook", hooked_id, 1, BASE_MS);
    expect_retry_on_schedule("hook", hooked_id, 2, BASE_MS);
    free(ok_id);
    free(twice_id);
    free(dead_id);
    free(hooked_id);
    consume_group_fini(&g);
}

Test(consume_failures, jetstream_retries_failures_on_the_backoff_schedule_and_dead_letters_at_max)
{
    failures_are_retried_on_schedule_and_dead_lettered_at_max_attempts("jetstream");
}

Test(consume_failures, db_backend_retries_failures_on_the_backoff_schedule_and_dead_letters_at_max)
{
    failures_are_retried_on_schedule_and_dead_lettered_at_max_attempts("db");
}

/* ---- no attempt spent ---------------------------------------------------------------------- */

static int
each_ran_at_least(char *const *ids, int n, long long runs)
{
    for (int i = 0; i < n; i++) {
        if (consume_test_lines(dir, ids[i], "") < runs) {
            return 0;
        }
    }
    return 1;
}

/*
 * An exec: handler that says "not now" - by `not_yet`, until the test opens
 * the gate - runs again and again without spending an attempt: with
 * OUTBOX_MAX_ATTEMPTS=1 a single spent attempt would dead-letter it.
 */
static void
retry_later_spends_no_attempt(const char *bus, const char *tag, const char *not_yet)
{
    enum { EVENTS = 5 };
    char spec[300];
    const char *const handlers[] = {spec, NULL};
    struct harness_proc consumer;
    struct consume_group g;
    char *ids[EVENTS];

    snprintf(spec, sizeof(spec),
             "later=exec:echo run >> \"$CONSUME_DIR/$OUTBOX_EVENT_ID\"; "
             "[ -e \"$CONSUME_DIR/open\" ] || %s",
             not_yet);
    consume_group_init(&g, bus, tag, dir);
    relay_env_set(&g.env, "OUTBOX_MAX_ATTEMPTS", "1"); /* one spent attempt dead-letters */
    for (int i = 0; i < EVENTS; i++) {
        ids[i] = enqueue_one("review.logged", 0);
    }
    consume_test_start(&consumer, &g.env, "later-1", handlers);
    HARNESS_WAIT_UNTIL(each_ran_at_least(ids, EVENTS, 3), 30000);
    consume_test_touch(dir, "open");
    HARNESS_WAIT_UNTIL(harness_scalar_ll(conn,
                                         "SELECT count(*) FROM outbox.processed_events "
                                         "WHERE handler = 'later' AND status = 'done'") == EVENTS,
                       30000);
    consume_test_stop(&consumer, 10000);
    consume_test_expect_nothing_spent(conn);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM public.ledger_log "
                                         "WHERE attempts > 0"),
                 0, "a retry-later answer counted an attempt");
    for (int i = 0; i < EVENTS; i++) {
        free(ids[i]);
    }
    consume_group_fini(&g);
}

Test(consume_failures, exit_75_from_an_exec_handler_spends_no_attempt_on_jetstream)
{
    retry_later_spends_no_attempt("jetstream", "LATER", "exit 75");
}

Test(consume_failures, exit_75_from_an_exec_handler_spends_no_attempt_on_the_db_backend)
{
    retry_later_spends_no_attempt("db", "LATER", "exit 75");
}

Test(consume_failures, an_exec_handler_stopped_by_sigterm_spends_no_attempt)
{
    /* The shell ends itself with SIGTERM, as a shutdown or an operator would. */
    retry_later_spends_no_attempt("db", "STOPPED", "kill -TERM $$");
}

/*
 * Two kinds of claims held elsewhere: a committed claim of another replica
 * whose lease has 3 s to run, and a claim inside another replica's open
 * transaction (rolled back after 3 s). Both events wait, without an
 * attempt, and run once, after the claim is gone.
 */
static void
busy_claims_spend_no_attempt(const char *bus)
{
    enum { EVENTS = 20 };
    const char *const handlers[] = {CONSUME_EFFECT("audit"), NULL};
    struct harness_proc consumer;
    struct consume_group g;
    PGconn *other = PQconnectdb(harness_db_url());
    char *leased_id, *open_id, sql[512];
    long long released_at_ms;

    cr_assert_eq(PQstatus(other), CONNECTION_OK);
    consume_group_init(&g, bus, "BUSY", dir);
    relay_env_set(&g.env, "OUTBOX_MAX_ATTEMPTS", "1");
    leased_id = enqueue_one("review.logged", 0);
    open_id = enqueue_one("review.logged", 0);
    relay_test_enqueue(conn, EVENTS - 2);
    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox.processed_events (event_id, handler, owner_token, "
             "claimed_until) VALUES ('%s', 'audit', gen_random_uuid(), now() + interval '3 s')",
             leased_id);
    harness_exec(conn, sql);
    harness_exec(conn, "CREATE TABLE public.held AS SELECT event_id, claimed_until "
                       "FROM outbox.processed_events");
    harness_exec(other, "BEGIN");
    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox.processed_events (event_id, handler, owner_token, "
             "claimed_until) VALUES ('%s', 'audit', gen_random_uuid(), now() + interval '1 h')",
             open_id);
    harness_exec(other, sql);

    consume_test_start(&consumer, &g.env, "busy-1", handlers);
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "audit") == EVENTS - 2, 30000);
    /* Not waiting for a condition: the other transaction holds its claim for 3 s. */
    harness_sleep_ms(3000);
    cr_assert_eq(about("SELECT count(*) FROM public.effects WHERE event_id = $1::uuid", open_id), 0,
                 "ran while another transaction held the claim");
    released_at_ms = harness_now_ms();
    harness_exec(other, "ROLLBACK");
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "audit") == EVENTS, 30000);
    cr_log_info("the claim rolled back elsewhere ran %lld ms later",
                harness_now_ms() - released_at_ms);
    consume_test_stop(&consumer, 10000);

    cr_assert_eq(about("SELECT count(*) FROM public.effects e JOIN public.held h USING (event_id) "
                       "WHERE e.event_id = $1::uuid AND e.at >= h.claimed_until",
                       leased_id),
                 1, "the event with a live claim elsewhere ran before that claim's lease ended");
    consume_test_expect_exactly_once(conn, "audit");
    consume_test_expect_nothing_spent(conn);
    PQfinish(other);
    free(leased_id);
    free(open_id);
    consume_group_fini(&g);
}

Test(consume_failures, a_claim_held_by_another_ledger_spends_no_attempt_on_jetstream)
{
    busy_claims_spend_no_attempt("jetstream");
}

Test(consume_failures, a_claim_held_by_another_ledger_spends_no_attempt_on_the_db_backend)
{
    busy_claims_spend_no_attempt("db");
}

/* ---- FAULTS.md T08 ---------------------------------------------------------------------- */

/*
 * Done marks refused in a consumer's log: a line per event
 * ("claim lost before done event_id=..."), or one for a round of marks
 * that says how many ("claim lost before done handler=... lost=N").
 */
static long long
refused_marks(const char *log)
{
    long long n = 0;

    for (const char *at = strstr(log, "claim lost before done"); at != NULL;
         at = strstr(at + 1, "claim lost before done")) {
        const char *eol = strchr(at, '\n'), *count = strstr(at, " lost=");

        n += count != NULL && (eol == NULL || count < eol) ? strtoll(count + 6, NULL, 10) : 1;
    }
    return n;
}

/* The hook's runs file (a line per run: event id, handler) into public.runs. */
static void
load_runs(void)
{
    char path[128], line[256], sql[256];
    FILE *f;

    harness_exec(conn, "CREATE TABLE public.runs (event_id uuid NOT NULL)");
    snprintf(path, sizeof(path), "%s/runs", dir);
    f = fopen(path, "r");
    cr_assert_not_null(f, "no runs file %s", path);
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, " \n")] = '\0';
        snprintf(sql, sizeof(sql), "INSERT INTO public.runs VALUES ('%.36s')", line);
        harness_exec(conn, sql);
    }
    fclose(f);
}

/* The first run anywhere blocks until the test says go; every run is counted. */
#define FROZEN_HOOK                                                                      \
    ":echo \"$OUTBOX_EVENT_ID $OUTBOX_NAME\" >> \"$CONSUME_DIR/runs\"; "                 \
    "if mkdir \"$CONSUME_DIR/first\" 2>/dev/null; then touch \"$CONSUME_DIR/started\"; " \
    "while [ ! -e \"$CONSUME_DIR/go\" ]; do sleep 0.05; done; fi"

/*
 * W1 freezes (SIGSTOP) inside its exec: handler, holding claims for a
 * batch; their 2 s lease runs out and W2 takes every event over and
 * finishes. W1 resumes, its handler returns, and it must change no ledger
 * row: every done row was completed by the owner that last claimed it.
 * `one_at_a_time`: the handler runs one child at a time (in_flight=1);
 * else up to its default of 8, and every run W1 had going when it froze
 * runs twice.
 */
static void
frozen_worker_changes_no_ledger_row(const char *bus, int one_at_a_time)
{
    enum { EVENTS = 10 };
    const char *const handlers[] = {
        CONSUME_EFFECT("audit"),
        one_at_a_time ? "hook=exec[in_flight=1]" FROZEN_HOOK : "hook=exec" FROZEN_HOOK,
        NULL,
    };
    struct harness_proc w1, w2;
    struct consume_group g;
    long long held, external_dups, lost;
    char *log;

    consume_group_init(&g, bus, "T08", dir);
    relay_env_set(&g.env, "OUTBOX_LEDGER_LEASE_SECONDS", "2");
    relay_env_set(&g.env, "OUTBOX_BATCH_SIZE", "5");
    relay_test_enqueue(conn, EVENTS);
    consume_test_start(&w1, &g.env, "w1", handlers);
    HARNESS_WAIT_UNTIL(consume_test_exists(dir, "started"), 30000);
    harness_proc_signal(&w1, SIGSTOP); /* the whole group: outboxd and its handler */
    /* A statement W1 sent just before it stopped still runs and commits:
     * the claims it holds are known once its sessions are idle. */
    HARNESS_WAIT_UNTIL(harness_scalar_ll(conn, "SELECT count(*) FROM pg_stat_activity "
                                               "WHERE datname = current_database() "
                                               "AND application_name LIKE 'outboxd%' "
                                               "AND state <> 'idle'") == 0,
                       10000);
    harness_exec(conn, "CREATE TABLE public.held AS SELECT event_id, owner_token "
                       "FROM outbox.processed_events WHERE handler = 'hook' "
                       "AND owner_token IS NOT NULL");
    held = harness_scalar_ll(conn, "SELECT count(*) FROM public.held");
    cr_assert_gt(held, 0, "the frozen worker holds no claim");
    consume_test_touch(dir, "go"); /* seen only once W1 resumes */

    consume_test_start(&w2, &g.env, "w2", handlers);
    HARNESS_WAIT_UNTIL(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.processed_events "
                                               "WHERE status = 'done'") == 2 * EVENTS,
                       30000);
    consume_test_stop(&w2, 10000);
    harness_exec(conn, "CREATE TABLE public.before AS SELECT * FROM outbox.processed_events");

    harness_proc_signal(&w1, SIGCONT);
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&w1, "claim lost before done"), 20000);
    consume_test_stop(&w1, 20000);

    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM (SELECT * FROM "
                                         "outbox.processed_events EXCEPT SELECT * FROM "
                                         "public.before) AS changed"),
                 0, "the resumed worker changed ledger rows");
    /* Every done mark was made by the owner of the last claim before it. */
    cr_assert_eq(harness_scalar_ll(
                     conn, "SELECT count(*) FROM public.ledger_log d WHERE d.status = 'done' "
                           "AND d.old_owner_token IS DISTINCT FROM (SELECT c.owner_token FROM "
                           "public.ledger_log c WHERE c.event_id = d.event_id AND c.handler = "
                           "d.handler AND c.seq < d.seq AND c.owner_token IS NOT NULL ORDER BY "
                           "c.seq DESC LIMIT 1)"),
                 0, "a row was marked done by an owner other than its last claimer");
    /* A done mark W1 sent just before the stop may still reach the server after the
     * snapshot of its claims (its session shows idle until the server reads it): that
     * one completed W1's own claim, before any takeover, and is no fault. */
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM public.ledger_log d JOIN "
                                         "public.held h ON h.event_id = d.event_id WHERE "
                                         "d.handler = 'hook' AND d.status = 'done' AND "
                                         "d.old_owner_token = h.owner_token AND EXISTS ("
                                         "SELECT 1 FROM public.ledger_log c WHERE "
                                         "c.event_id = d.event_id AND c.handler = d.handler "
                                         "AND c.seq < d.seq AND c.owner_token IS NOT NULL "
                                         "AND c.owner_token <> h.owner_token)"),
                 0, "the frozen worker's token completed a claim that was taken over");
    consume_test_expect_exactly_once(conn, "audit");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.processed_events "
                                         "WHERE handler = 'hook' AND status = 'done'"),
                 EVENTS);
    consume_test_expect_nothing_spent(conn);

    /* External effects: once per event, plus the runs of the frozen worker. */
    external_dups = consume_test_lines(dir, "runs", "") - EVENTS;
    log = harness_proc_log(&w1);
    /* A claim held but not started yet (claimed ahead, or by a round that committed as it
     * froze) is found lost before its run and never run: it has no done mark to refuse. */
    lost = one_at_a_time ? (long long)text_count(log, "claim lost before done")
                         : refused_marks(log) +
                               (long long)text_count(log, "claim taken ahead lost before its run");
    free(log);
    cr_log_info("%s: the frozen worker held %lld claim(s); external duplicates %lld, "
                "its done marks refused %lld",
                bus, held, external_dups, lost);
    if (one_at_a_time) {
        /* Only the run in flight when it froze: the rest of its batch was done by then. */
        cr_assert_eq(external_dups, 1, "the resumed worker ran handlers of events done elsewhere");
        cr_assert_eq(lost, 1, "the in-flight run's done mark must have been refused");
    } else {
        /*
         * Only the runs in flight when it froze (the claims it held) run
         * twice: the others were done. A child stopped before its first
         * line, whose claim was found lost on resume, never ran at all,
         * so there may be fewer twice-run events than claims held.
         */
        load_runs();
        cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM (SELECT event_id FROM "
                                             "public.runs GROUP BY event_id HAVING count(*) > 1 "
                                             "EXCEPT SELECT event_id FROM public.held) AS x"),
                     0,
                     "the resumed worker ran handlers of events done elsewhere (%lld runs twice, "
                     "%lld claims held)",
                     external_dups, held);
        cr_assert_leq(external_dups, held, "%lld runs twice, %lld claims held", external_dups,
                      held);
        cr_assert_eq(lost, held,
                     "the in-flight runs' done marks must have been refused, and the claims "
                     "not started given up");
    }
    consume_group_fini(&g);
}

Test(consume_failures,
     a_frozen_exec_worker_whose_claim_was_taken_over_changes_no_ledger_row_on_jetstream)
{
    frozen_worker_changes_no_ledger_row("jetstream", 1);
}

Test(consume_failures,
     a_frozen_exec_worker_whose_claim_was_taken_over_changes_no_ledger_row_on_the_db_backend)
{
    frozen_worker_changes_no_ledger_row("db", 1);
}

Test(consume_failures, a_frozen_exec_worker_with_runs_in_flight_changes_no_ledger_row_on_jetstream)
{
    frozen_worker_changes_no_ledger_row("jetstream", 0);
}

Test(consume_failures,
     a_frozen_exec_worker_with_runs_in_flight_changes_no_ledger_row_on_the_db_backend)
{
    frozen_worker_changes_no_ledger_row("db", 0);
}

/*
 * A SQL handler that always hits its own lock timeout (55P03: a row held
 * by another session) fails like any other error: attempts are spent and
 * it is dead-lettered at OUTBOX_MAX_ATTEMPTS, not retried forever as if
 * the database were away.
 */
Test(consume_failures, a_sql_handler_that_keeps_timing_out_is_dead_lettered_at_max_attempts)
{
    enum { EVENTS = 3, MAX_ATTEMPTS = 2 };
    const char *const handlers[] = {
        "locked=sql:SELECT 1 FROM public.locked FOR UPDATE NOWAIT",
        NULL,
    };
    struct harness_proc consumer;
    struct consume_group g;
    PGconn *holder = PQconnectdb(harness_db_url());

    cr_assert_eq(PQstatus(holder), CONNECTION_OK, "%s", PQerrorMessage(holder));
    harness_exec(conn, "CREATE TABLE public.locked (x integer); INSERT INTO public.locked "
                       "VALUES (1)");
    harness_exec(holder, "BEGIN");
    harness_exec(holder, "SELECT * FROM public.locked FOR UPDATE");
    consume_group_init(&g, "db", "TIMEOUT", dir);
    relay_env_set_int(&g.env, "OUTBOX_MAX_ATTEMPTS", MAX_ATTEMPTS);
    relay_env_set(&g.env, "OUTBOX_BACKOFF_BASE_MS", "100");
    relay_test_enqueue(conn, EVENTS);
    consume_test_start(&consumer, &g.env, "timeout-1", handlers);
    HARNESS_WAIT_UNTIL(
        harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters") == EVENTS, 30000);
    consume_test_stop(&consumer, 10000);
    harness_exec(holder, "ROLLBACK");
    PQfinish(holder);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.processed_events "
                                         "WHERE handler = 'locked' AND dead_at IS NOT NULL "
                                         "AND attempts = 2 AND last_error LIKE '%lock%'"),
                 EVENTS, "each event must be dead after exactly max attempts, naming the lock");
    consume_group_fini(&g);
}

/* True once `pid` is gone or only a zombie waiting for its reaper. */
static int
process_gone(long pid)
{
    char path[64], state = '?';
    FILE *f;
    int read_ok;

    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    f = fopen(path, "r");
    if (f == NULL) {
        return 1;
    }
    read_ok = fscanf(f, "%*d (%*[^)]) %c", &state) == 1;
    fclose(f);
    return read_ok && state == 'Z';
}

/*
 * An exec: handler past OUTBOX_HANDLER_TIMEOUT_SECONDS fails, even one that
 * never reads an envelope bigger than a pipe holds, and its whole process
 * group is killed: a command it started in the background does not live on
 * to run beside the retry.
 */
Test(consume_failures, an_exec_handler_past_its_timeout_fails_and_its_whole_group_is_killed)
{
    const char *const handlers[] = {
        "slow=exec:sleep 60 & echo $! > \"$CONSUME_DIR/pid\"; sleep 60",
        NULL,
    };
    struct harness_proc consumer;
    struct consume_group g;
    long pid = 0;
    char path[128];
    FILE *f;

    consume_group_init(&g, "db", "TIMEOUT", dir);
    relay_env_set(&g.env, "OUTBOX_HANDLER_TIMEOUT_SECONDS", "1");
    relay_env_set(&g.env, "OUTBOX_MAX_ATTEMPTS", "1");
    relay_test_enqueue_sized(conn, 1, "review.logged", 200000); /* over the 64 KiB pipe */
    consume_test_start(&consumer, &g.env, "slow-1", handlers);
    /* Well inside the 60 s the handler would take: only the timeout can end it. */
    HARNESS_WAIT_UNTIL(harness_scalar_ll(conn,
                                         "SELECT count(*) FROM outbox.dead_letters "
                                         "WHERE reason LIKE '%ran longer than 1000 ms%'") == 1,
                       20000);
    consume_test_stop(&consumer, 10000);
    snprintf(path, sizeof(path), "%s/pid", dir);
    f = fopen(path, "r");
    cr_assert(f != NULL && fscanf(f, "%ld", &pid) == 1, "no pid in %s", path);
    fclose(f);
    HARNESS_WAIT_UNTIL(process_gone(pid), 5000);
    consume_group_fini(&g);
}

/*
 * A SQL handler whose every run fails on a live connection with a class 08
 * SQLSTATE (08P01: its statement takes $2, the consumer binds only $1) is
 * the handler's failure, not an outage: attempts are spent and it is
 * dead-lettered at OUTBOX_MAX_ATTEMPTS with the server's reason, instead of
 * being given back forever without a word.
 */
Test(consume_failures, a_sql_handler_failing_with_08p01_on_a_live_connection_is_dead_lettered)
{
    enum { EVENTS = 2, MAX_ATTEMPTS = 2 };
    const char *const handlers[] = {
        "twoparams=sql:select $2",
        NULL,
    };
    struct harness_proc consumer;
    struct consume_group g;

    consume_group_init(&g, "db", "BIND", dir);
    relay_env_set_int(&g.env, "OUTBOX_MAX_ATTEMPTS", MAX_ATTEMPTS);
    relay_env_set(&g.env, "OUTBOX_BACKOFF_BASE_MS", "100");
    relay_test_enqueue(conn, EVENTS);
    consume_test_start(&consumer, &g.env, "bind-1", handlers);
    HARNESS_WAIT_UNTIL(
        harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters") == EVENTS, 30000);
    consume_test_stop(&consumer, 10000);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters "
                                         "WHERE handler = 'twoparams' AND attempts = 2 "
                                         "AND reason LIKE '%bind message supplies 1 parameters%'"),
                 EVENTS, "each event must be dead after exactly max attempts, with the reason");
    consume_group_fini(&g);
}
