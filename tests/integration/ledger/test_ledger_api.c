/* SPDX-License-Identifier: MIT */
/*
 * test_ledger_api.c - the ledger's public SQL API (migration 0018), as a
 * service in another language calls it over its own connection:
 * try_claim() commits with the caller's effects and vanishes with their
 * rollback; racing claimers run each event once; claim() fences its
 * effect with a token, so a claimer whose lease was taken over after a
 * crash or a stall can no longer complete or fail; fail() counts attempts,
 * backs off and dead-letters like the daemon; an ordered event waits for
 * its predecessor for that handler; bad arguments are refused naming them;
 * outboxctl traces, lists and requeues these claims as the daemon's.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_test.h"
#include "harness.h"
#include "ledger_helpers.h"

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    harness_exec(conn, "CREATE TABLE public.effects (event_id uuid NOT NULL, by_worker int)");
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(ledger_api, .init = setup, .fini = teardown, .timeout = 120);

/* `sql` on `c` must fail with `sqlstate`; returns its message and detail, to check (free it). */
static char *
refused(PGconn *c, const char *sql, const char *sqlstate)
{
    PGresult *res = PQexec(c, sql);
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
    const char *primary;
    char *text;

    cr_assert(state != NULL && strcmp(state, sqlstate) == 0, "%s: wanted %s, got %s: %s", sql,
              sqlstate, state ? state : "success", PQresultErrorMessage(res));
    primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    text = malloc(strlen(primary) + (detail ? strlen(detail) : 0) + 4);
    cr_assert(text != NULL);
    sprintf(text, "%s | %s", primary, detail ? detail : "");
    PQclear(res);
    return text;
}

static void
expect_refused(PGconn *c, const char *sql, const char *sqlstate, const char *needle)
{
    char *text = refused(c, sql, sqlstate);

    cr_assert(strstr(text, needle) != NULL, "%s: the error does not say \"%s\": %s", sql, needle,
              text);
    free(text);
}

/* One event written through outbox.enqueue(); its id and envelope. */
struct one_event {
    char id[37];
    char *envelope;
};

static struct one_event
event_new(const char *aggregate_id)
{
    struct one_event e = {0};
    char sql[256];
    char *id;

    snprintf(sql, sizeof(sql), "SELECT outbox.enqueue('order', %s, 'changed', '{}')",
             aggregate_id ? aggregate_id : "gen_random_uuid()");
    id = harness_scalar_text(conn, sql);
    snprintf(e.id, sizeof(e.id), "%s", id);
    free(id);
    snprintf(sql, sizeof(sql), "SELECT envelope::text FROM outbox.events WHERE id = '%s'", e.id);
    e.envelope = harness_scalar_text(conn, sql);
    return e;
}

/* The one value `fmt`'s statement returns on `c` (free it). */
__attribute__((format(printf, 2, 3))) static char *
scalar(PGconn *c, const char *fmt, ...)
{
    char sql[4096];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    return harness_scalar_text(c, sql);
}

static int
try_claim(PGconn *c, const char *id)
{
    char *v = scalar(c, "SELECT outbox.try_claim('%s', 'billing')", id);
    int ran = strcmp(v, "t") == 0;

    free(v);
    return ran;
}

/* The number `fmt`'s statement returns on the test's own connection. */
__attribute__((format(printf, 1, 2))) static long long
ll(const char *fmt, ...)
{
    char sql[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    return harness_scalar_ll(conn, sql);
}

Test(ledger_api, try_claim_commits_with_the_effects_and_runs_each_event_once)
{
    struct one_event e = event_new(NULL);
    PGconn *svc = helper_connect();

    harness_exec(svc, "BEGIN");
    cr_assert(try_claim(svc, e.id));
    cr_assert(!try_claim(svc, e.id), "a second claim in the same transaction must say done");
    harness_exec(svc, "COMMIT");
    cr_assert(!try_claim(svc, e.id), "done: the claim committed");
    cr_assert_eq(ll("SELECT count(*) FROM outbox.processed_events WHERE event_id = '%s' "
                    "AND handler = 'billing' AND status = 'done' AND finished_at IS NOT NULL",
                    e.id),
                 1);
    free(e.envelope);
    PQfinish(svc);
}

Test(ledger_api, a_rolled_back_try_claim_leaves_nothing_and_the_event_runs_again)
{
    struct one_event e = event_new(NULL);
    PGconn *svc = helper_connect();
    char sql[256];

    harness_exec(svc, "BEGIN");
    cr_assert(try_claim(svc, e.id));
    snprintf(sql, sizeof(sql), "INSERT INTO public.effects VALUES ('%s', 1)", e.id);
    harness_exec(svc, sql);
    harness_exec(svc, "ROLLBACK");
    cr_assert_eq(ll("SELECT count(*) FROM outbox.processed_events WHERE event_id = '%s'", e.id), 0);
    cr_assert_eq(ll("SELECT count(*) FROM public.effects WHERE event_id = '%s'", e.id), 0);
    harness_exec(svc, "BEGIN");
    cr_assert(try_claim(svc, e.id), "the rolled-back claim must not count as done");
    harness_exec(svc, sql);
    harness_exec(svc, "COMMIT");
    cr_assert_eq(ll("SELECT count(*) FROM public.effects WHERE event_id = '%s'", e.id), 1);
    free(e.envelope);
    PQfinish(svc);
}

/*
 * `a` claims `id` in an open transaction; `b`'s try_claim must wait for it,
 * and once `a` ends with `end` (COMMIT or ROLLBACK) answer `want`.
 */
static void
waiter_answers(PGconn *a, PGconn *b, const char *id, const char *end, const char *want)
{
    char sql[256];
    PGresult *res;

    harness_exec(a, "BEGIN");
    cr_assert(try_claim(a, id));
    harness_exec(b, "BEGIN");
    snprintf(sql, sizeof(sql), "SELECT outbox.try_claim('%s', 'billing')", id);
    cr_assert(PQsendQuery(b, sql));
    harness_sleep_ms(300);
    cr_assert(PQisBusy(b) || (PQconsumeInput(b), PQisBusy(b)), "b must wait for a's claim");
    harness_exec(a, end);
    res = PQgetResult(b);
    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(res));
    cr_assert_str_eq(PQgetvalue(res, 0, 0), want, "after a's %s", end);
    PQclear(res);
    while ((res = PQgetResult(b)) != NULL) {
        PQclear(res);
    }
    harness_exec(b, "COMMIT");
}

Test(ledger_api, a_claim_held_by_an_open_transaction_is_waited_for_not_run_twice)
{
    struct one_event done = event_new(NULL), undone = event_new(NULL);
    PGconn *a = helper_connect(), *b = helper_connect();

    waiter_answers(a, b, done.id, "COMMIT", "f");     /* the waiter finds it done */
    waiter_answers(a, b, undone.id, "ROLLBACK", "t"); /* the waiter runs it */
    cr_assert_eq(ll("SELECT count(*) FROM outbox.processed_events WHERE event_id = '%s' "
                    "AND status = 'done'",
                    undone.id),
                 1);
    free(done.envelope);
    free(undone.envelope);
    PQfinish(a);
    PQfinish(b);
}

enum { RACERS = 4, RACE_EVENTS = 300 };

struct racer {
    int n;
    char (*ids)[37];
};

/* Every event, in its own order, each in a transaction: claim, effect, commit. */
static void *
race(void *arg)
{
    struct racer *r = arg;
    PGconn *c = PQconnectdb(harness_db_url());
    char sql[512];

    cr_assert_eq(PQstatus(c), CONNECTION_OK);
    for (int k = 0; k < RACE_EVENTS; k++) {
        int i = (k * (2 * r->n + 1) + r->n * 37) % RACE_EVENTS; /* a different order each */
        PGresult *res;

        snprintf(sql, sizeof(sql),
                 "WITH c AS (SELECT outbox.try_claim('%s', 'billing') AS run) "
                 "INSERT INTO public.effects SELECT '%s', %d FROM c WHERE c.run",
                 r->ids[i], r->ids[i], r->n);
        res = PQexec(c, "BEGIN");
        PQclear(res);
        res = PQexec(c, sql);
        cr_assert_eq(PQresultStatus(res), PGRES_COMMAND_OK, "%s", PQresultErrorMessage(res));
        PQclear(res);
        res = PQexec(c, "COMMIT");
        cr_assert_eq(PQresultStatus(res), PGRES_COMMAND_OK, "%s", PQresultErrorMessage(res));
        PQclear(res);
    }
    PQfinish(c);
    return NULL;
}

Test(ledger_api, racing_try_claims_run_every_event_once)
{
    struct helper_events ev = helper_events_new(conn, RACE_EVENTS);
    struct racer racers[RACERS];
    pthread_t threads[RACERS];

    for (int n = 0; n < RACERS; n++) {
        racers[n] = (struct racer){.n = n, .ids = ev.ids};
        cr_assert_eq(pthread_create(&threads[n], NULL, race, &racers[n]), 0);
    }
    for (int n = 0; n < RACERS; n++) {
        pthread_join(threads[n], NULL);
    }
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(DISTINCT event_id) FROM public.effects"),
                 RACE_EVENTS);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM public.effects"), RACE_EVENTS,
                 "an event's effect ran twice");
    cr_assert_gt(harness_scalar_ll(conn, "SELECT count(DISTINCT by_worker) FROM public.effects"), 1,
                 "the racers did not race");
    helper_events_free(&ev);
}

/* Runs out the lease of `id`'s claim, as time would. */
static void
lease_runs_out(const char *id)
{
    char sql[256];

    snprintf(sql, sizeof(sql),
             "UPDATE outbox.processed_events SET claimed_until = now() - interval '1 second' "
             "WHERE event_id = '%s' AND handler = 'billing'",
             id);
    harness_exec(conn, sql);
}

Test(ledger_api, a_claimer_that_crashed_is_taken_over_and_its_token_refused)
{
    struct one_event e = event_new(NULL);
    PGconn *dead = helper_connect(), *next = helper_connect();
    char sql[256];
    char *old_token, *new_token, *v;

    old_token = scalar(dead, "SELECT outbox.claim('%s', 'billing', 30)", e.id);
    cr_assert_eq(strlen(old_token), 36, "claim gave no token: %s", old_token);
    PQfinish(dead); /* the claimer crashes between claim and complete */

    /* Its lease still runs: another claimer is told to come back, and when. */
    snprintf(sql, sizeof(sql), "SELECT outbox.claim('%s', 'billing', 30)", e.id);
    expect_refused(next, sql, "55P03", "retry_after_ms=");

    lease_runs_out(e.id);
    new_token = scalar(next, "SELECT outbox.claim('%s', 'billing', 30)", e.id);
    cr_assert_eq(strlen(new_token), 36);
    cr_assert_str_neq(new_token, old_token);

    /* The old token is refused everywhere; the new one completes. */
    v = scalar(next, "SELECT outbox.renew('%s', 'billing', '%s', 30)", e.id, old_token);
    cr_assert_str_eq(v, "f");
    free(v);
    v = scalar(next, "SELECT outbox.complete('%s', 'billing', '%s')", e.id, old_token);
    cr_assert_str_eq(v, "f", "a stale token completed the event");
    free(v);
    v = scalar(next, "SELECT outcome FROM outbox.fail('%s', 'billing', '%s', 'late')", e.id,
               old_token);
    cr_assert_str_eq(v, "stale");
    free(v);
    cr_assert_eq(ll("SELECT attempts FROM outbox.processed_events WHERE event_id = '%s'", e.id), 0,
                 "a stale failure counted");
    v = scalar(next, "SELECT outbox.renew('%s', 'billing', '%s', 30)", e.id, new_token);
    cr_assert_str_eq(v, "t");
    free(v);
    v = scalar(next, "SELECT outbox.complete('%s', 'billing', '%s')", e.id, new_token);
    cr_assert_str_eq(v, "t");
    free(v);
    v = scalar(next, "SELECT outbox.complete('%s', 'billing', '%s')", e.id, new_token);
    cr_assert_str_eq(v, "f", "completed twice");
    free(v);
    v = scalar(next, "SELECT coalesce(outbox.claim('%s', 'billing', 30)::text, 'none')", e.id);
    cr_assert_str_eq(v, "none", "a done event must not be claimed again");
    free(v);
    free(old_token);
    free(new_token);
    free(e.envelope);
    PQfinish(next);
}

Test(ledger_api, failures_back_off_then_dead_letter_like_the_daemons)
{
    struct one_event e = event_new(NULL);
    PGconn *svc = helper_connect();
    char sql[2048];
    char *token, *v;

    token = scalar(svc, "SELECT outbox.claim('%s', 'billing', 30)", e.id);
    snprintf(sql, sizeof(sql),
             "SELECT outcome || ' ' || attempts || ' ' || "
             "(retry_at - now() BETWEEN interval '3 seconds' AND interval '6 seconds') "
             "FROM outbox.fail('%s', 'billing', '%s', 'smtp said no', NULL, 3)",
             e.id, token);
    v = harness_scalar_text(svc, sql);
    cr_assert_str_eq(v, "retry 1 true", "first failure: the base backoff of 5 s, +-10 %%");
    free(v);
    free(token);

    /* Backing off: not now, and for how long. */
    snprintf(sql, sizeof(sql), "SELECT outbox.claim('%s', 'billing', 30)", e.id);
    expect_refused(svc, sql, "55000", "retry_after_ms=");
    snprintf(sql, sizeof(sql), "SELECT outbox.try_claim('%s', 'billing')", e.id);
    expect_refused(svc, sql, "55000", "backs off after 1 failures");

    /* A try_claim whose transaction rolled back fails with no token. */
    harness_exec(conn, "UPDATE outbox.processed_events SET next_attempt_at = now()");
    harness_exec(svc, "BEGIN");
    cr_assert(try_claim(svc, e.id));
    harness_exec(svc, "ROLLBACK");
    v = scalar(svc,
               "SELECT outcome || ' ' || attempts FROM outbox.fail('%s', 'billing', NULL, "
               "'constraint broke', NULL, 3)",
               e.id);
    cr_assert_str_eq(v, "retry 2");
    free(v);

    harness_exec(conn, "UPDATE outbox.processed_events SET next_attempt_at = now()");
    token = scalar(svc, "SELECT outbox.claim('%s', 'billing', 30)", e.id);
    snprintf(sql, sizeof(sql),
             "SELECT outcome || ' ' || attempts || ' ' || (retry_at IS NULL) "
             "FROM outbox.fail('%s', 'billing', '%s', 'gave up', '%s', 3)",
             e.id, token, e.envelope);
    v = harness_scalar_text(svc, sql);
    cr_assert_str_eq(v, "dead 3 true");
    free(v);
    free(token);
    cr_assert_eq(ll("SELECT count(*) FROM outbox.dead_letters WHERE event_id = '%s' AND "
                    "handler = 'billing' AND reason = 'gave up' AND attempts = 3 AND "
                    "envelope ->> 'id' = event_id::text",
                    e.id),
                 1);
    /* Dead: acked by both forms, run by neither. */
    v = scalar(svc, "SELECT coalesce(outbox.claim('%s', 'billing', 30)::text, 'none')", e.id);
    cr_assert_str_eq(v, "none");
    free(v);
    cr_assert(!try_claim(svc, e.id));
    free(e.envelope);
    PQfinish(svc);
}

Test(ledger_api, an_ordered_event_waits_for_its_predecessor_for_that_handler)
{
    struct one_event e1, e2, e3;
    PGconn *svc = helper_connect();
    char sql[4096];
    char *token, *v;

    harness_exec(conn, "SELECT outbox.set_ordering(true)");
    e1 = event_new("'8c3e3f4e-3f44-4a4c-9a53-6b5e8f8d1c01'");
    e2 = event_new("'8c3e3f4e-3f44-4a4c-9a53-6b5e8f8d1c01'");
    e3 = event_new("'8c3e3f4e-3f44-4a4c-9a53-6b5e8f8d1c01'");

    /* Without the envelope the number is unknown: refused, not run out of order. */
    snprintf(sql, sizeof(sql), "SELECT outbox.try_claim('%s', 'billing')", e2.id);
    expect_refused(svc, sql, "22023", "envelope is required");

    /* try_claim: 2 before 1 is refused, and leaves nothing behind. */
    harness_exec(svc, "BEGIN");
    snprintf(sql, sizeof(sql), "SELECT outbox.try_claim('%s', 'billing', '%s')", e2.id,
             e2.envelope);
    expect_refused(svc, sql, "55000", "waits for number 1");
    harness_exec(svc, "ROLLBACK");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.parked_events"), 0);
    harness_exec(svc, "BEGIN");
    v = scalar(svc, "SELECT outbox.try_claim('%s', 'billing', '%s')", e1.id, e1.envelope);
    cr_assert_str_eq(v, "t");
    free(v);
    harness_exec(svc, "COMMIT");
    harness_exec(svc, "BEGIN");
    v = scalar(svc, "SELECT outbox.try_claim('%s', 'billing', '%s')", e2.id, e2.envelope);
    cr_assert_str_eq(v, "t", "1 is done: 2 runs");
    free(v);
    harness_exec(svc, "COMMIT");

    /* claim: 3 runs only once 2 is completed, for this handler. */
    token = scalar(svc, "SELECT outbox.claim('%s', 'mailer', 30, '%s')", e1.id, e1.envelope);
    snprintf(sql, sizeof(sql), "SELECT outbox.claim('%s', 'mailer', 30, '%s')", e2.id, e2.envelope);
    expect_refused(svc, sql, "55000", "waits for number 1 to be done by handler mailer");
    v = scalar(svc, "SELECT outbox.complete('%s', 'mailer', '%s')", e1.id, token);
    cr_assert_str_eq(v, "t");
    free(v);
    free(token);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT last_seq FROM outbox.handler_progress WHERE "
                                         "handler = 'mailer'"),
                 1, "complete() must move the handler's order on");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.claim_orders"), 0);
    token = scalar(svc, "SELECT outbox.claim('%s', 'mailer', 30, '%s')", e2.id, e2.envelope);
    cr_assert_eq(strlen(token), 36, "1 is complete: 2 runs");
    /* A failed claim does not move the order on: 3 still waits. */
    v = scalar(svc, "SELECT outcome FROM outbox.fail('%s', 'mailer', '%s', 'down')", e2.id, token);
    cr_assert_str_eq(v, "retry");
    free(v);
    free(token);
    snprintf(sql, sizeof(sql), "SELECT outbox.claim('%s', 'mailer', 30, '%s')", e3.id, e3.envelope);
    expect_refused(svc, sql, "55000", "waits for number 2");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT last_seq FROM outbox.handler_progress WHERE "
                                         "handler = 'mailer'"),
                 1);
    free(e1.envelope);
    free(e2.envelope);
    free(e3.envelope);
    PQfinish(svc);
}

Test(ledger_api, bad_arguments_are_refused_naming_them)
{
    struct one_event e = event_new(NULL);
    char sql[2048];

    snprintf(sql, sizeof(sql), "SELECT outbox.try_claim('%s', 'no spaces')", e.id);
    expect_refused(conn, sql, "22023", "handler 'no spaces' is not a handler name");
    expect_refused(conn, "SELECT outbox.try_claim(NULL, 'billing')", "22023",
                   "event_id is required");
    snprintf(sql, sizeof(sql), "SELECT outbox.claim('%s', 'billing', 0)", e.id);
    expect_refused(conn, sql, "22023", "lease_seconds 0 is outside 1 to 86400");
    snprintf(sql, sizeof(sql),
             "SELECT outbox.claim('%s', 'billing', 30, '{\"id\": "
             "\"00000000-0000-0000-0000-000000000001\"}')",
             e.id);
    expect_refused(conn, sql, "22023", "envelope.id '00000000-0000-0000-0000-000000000001' is not");
    snprintf(sql, sizeof(sql),
             "SELECT outbox.claim('%s', 'billing', 30, jsonb_build_object('id', '%s', "
             "'aggregate_type', 'order', 'aggregate_id', gen_random_uuid(), 'aggregate_seq', 0))",
             e.id, e.id);
    expect_refused(conn, sql, "22023", "envelope.aggregate_seq 0 is not a whole number from 1");
    snprintf(sql, sizeof(sql), "SELECT * FROM outbox.fail('%s', 'billing', NULL, '')", e.id);
    expect_refused(conn, sql, "22023", "reason is required");
    snprintf(sql, sizeof(sql), "SELECT * FROM outbox.fail('%s', 'billing', NULL, 'x', NULL, 0)",
             e.id);
    expect_refused(conn, sql, "22023", "max_attempts 0 is outside 1 to 1000");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.processed_events"), 0,
                 "a refused call wrote to the ledger");
    free(e.envelope);
}

Test(ledger_api, outboxctl_traces_lists_and_requeues_these_claims_as_the_daemons)
{
    struct one_event e = event_new(NULL);
    struct relay_env env;
    struct ctl_run r;
    char *token, *v;
    json_t *line;

    relay_env_init(&env, harness_db_url(), harness_nats_url(), "API", "api");
    relay_env_set(&env, "OUTBOX_BUS", "db");
    token = scalar(conn, "SELECT outbox.claim('%s', 'billing', 30)", e.id);
    v = scalar(conn,
               "SELECT outcome FROM outbox.fail('%s', 'billing', '%s', 'card declined', "
               "'%s', 1)",
               e.id, token, e.envelope);
    cr_assert_str_eq(v, "dead");
    free(v);
    free(token);

    ctl_expect(&r, &env, 0, (const char *const[]){"trace", e.id, "--json", NULL});
    line = ctl_line(&r, "ledger", 0);
    cr_assert_str_eq(ctl_str(line, "handler"), "billing", "%s", r.out);
    cr_assert_str_eq(ctl_str(ctl_line(&r, "dead_letter", 0), "handler"), "billing", "%s", r.out);
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 0, (const char *const[]){"dead", "list", "--json", NULL});
    cr_assert(strstr(r.out, "card declined") != NULL, "%s", r.out);
    ctl_run_fini(&r);

    ctl_expect(&r, &env, 0, (const char *const[]){"dead", "requeue", "--handler", "billing", NULL});
    ctl_run_fini(&r);
    harness_exec(conn, "BEGIN");
    cr_assert(try_claim(conn, e.id), "requeued: the event runs once more");
    harness_exec(conn, "COMMIT");
    cr_assert(!try_claim(conn, e.id), "and only once");
    relay_env_fini(&env);
    free(e.envelope);
}
