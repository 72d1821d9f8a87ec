/* SPDX-License-Identifier: MIT */
/*
 * test_ledger_receive.c - outbox.receive() (migration 0020), the pull half
 * of the ledger's SQL API over the DB-only backend: it hands out events
 * claimed for a handler with their tokens, complete() finishes them once,
 * racing receivers run each event once, a receiver that dies has its
 * events taken by another once their lease runs out and its tokens are
 * refused, fail() retries after retry_at and dead-letters at max_attempts
 * (outboxctl dead list shows it), every handler of the group gets each
 * event and the outbox row is finished only once all are done, an ordered
 * aggregate's events come in number order only, a finished head's successor
 * is made due without a lease (migration 0022) and handed out at once, bad
 * arguments are refused.
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

TestSuite(ledger_receive, .init = setup, .fini = teardown, .timeout = 180);

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

/* The one value `fmt`'s statement returns on `c` (free it). */
__attribute__((format(printf, 2, 3))) static char *
scalar(PGconn *c, const char *fmt, ...)
{
    char sql[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    return harness_scalar_text(c, sql);
}

static void
enqueue(int n, const char *aggregate_id)
{
    char sql[256];

    snprintf(sql, sizeof(sql),
             "SELECT outbox.enqueue('order', %s, 'changed', '{}') FROM generate_series(1, %d)",
             aggregate_id ? aggregate_id : "gen_random_uuid()", n);
    harness_exec(conn, sql);
}

/* receive() on `c`: rows (event_id, token, envelope, attempts, aggregate_seq). */
static PGresult *
receive(PGconn *c, const char *handler, int max, int lease_seconds)
{
    char sql[256];
    PGresult *res;

    snprintf(sql, sizeof(sql),
             "SELECT event_id, token, envelope, attempts, envelope ->> 'aggregate_seq' "
             "FROM outbox.receive('%s', %d, %d)",
             handler, max, lease_seconds);
    res = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s: %s", sql, PQresultErrorMessage(res));
    return res;
}

/* receive() on `c` until it hands out something or `within_ms` pass (then no rows). */
static PGresult *
receive_within(PGconn *c, const char *handler, int max, int lease_seconds, int within_ms)
{
    long long until = harness_now_ms() + within_ms;

    for (;;) {
        PGresult *res = receive(c, handler, max, lease_seconds);

        if (PQntuples(res) > 0 || harness_now_ms() >= until) {
            return res;
        }
        PQclear(res);
        harness_sleep_ms(100);
    }
}

static int
complete(PGconn *c, const char *handler, PGresult *rows, int i)
{
    char *v = scalar(c, "SELECT outbox.complete('%s', '%s', '%s')", PQgetvalue(rows, i, 0), handler,
                     PQgetvalue(rows, i, 1));
    int done = strcmp(v, "t") == 0;

    free(v);
    return done;
}

static void
expect_refused(PGconn *c, const char *sql, const char *sqlstate, const char *needle)
{
    PGresult *res = PQexec(c, sql);
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

    cr_assert(state != NULL && strcmp(state, sqlstate) == 0, "%s: wanted %s, got %s: %s", sql,
              sqlstate, state ? state : "success", PQresultErrorMessage(res));
    cr_assert(strstr(PQresultErrorMessage(res), needle) != NULL,
              "%s: the error does not say \"%s\": %s", sql, needle, PQresultErrorMessage(res));
    PQclear(res);
}

Test(ledger_receive, hands_out_events_that_complete_finishes_once)
{
    PGresult *rows, *again;

    enqueue(5, NULL);
    rows = receive(conn, "mailer", 10, 30);
    cr_assert_eq(PQntuples(rows), 5);
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(PQgetisnull(rows, i, 1), 0, "a token for each event");
        cr_assert(strstr(PQgetvalue(rows, i, 2), PQgetvalue(rows, i, 0)) != NULL,
                  "the envelope is the event's: %s", PQgetvalue(rows, i, 2));
        cr_assert_str_eq(PQgetvalue(rows, i, 3), "0");
    }
    again = receive(conn, "mailer", 10, 30);
    cr_assert_eq(PQntuples(again), 0, "claimed events are not handed out twice");
    PQclear(again);
    for (int i = 0; i < 5; i++) {
        cr_assert(complete(conn, "mailer", rows, i));
        cr_assert(!complete(conn, "mailer", rows, i), "complete finishes once");
    }
    /* Done: never handed out again, and the outbox rows are finished once seen done. */
    again = receive_within(conn, "mailer", 10, 30, 2500);
    cr_assert_eq(PQntuples(again), 0);
    PQclear(again);
    cr_assert_eq(ll("SELECT count(*) FROM outbox.events"), 0, "the rows are finished");
    cr_assert_eq(ll("SELECT count(*) FROM outbox.processed_events WHERE handler = 'mailer' "
                    "AND status = 'done'"),
                 5);
    cr_assert_eq(ll("SELECT count(*) FROM outbox.handlers WHERE name = 'mailer' "
                    "AND backend = 'db' AND consumer_group = 'receive'"),
                 1, "the handler is registered like the DB feed's");
    PQclear(rows);
}

#define RACE_EVENTS 300
#define RACERS      3

struct racer {
    int worker;
    int handled;
};

/* Receives and completes until every event's effect is in, or a minute passes. */
static void *
race(void *arg)
{
    struct racer *r = arg;
    PGconn *c = helper_connect();
    long long until = harness_now_ms() + 60000;

    while (harness_now_ms() < until) {
        PGresult *rows = receive(c, "racer", 25, 30);
        char sql[256];

        for (int i = 0; i < PQntuples(rows); i++) {
            snprintf(sql, sizeof(sql), "INSERT INTO public.effects VALUES ('%s', %d)",
                     PQgetvalue(rows, i, 0), r->worker);
            harness_exec(c, sql);
            cr_assert(complete(c, "racer", rows, i));
            r->handled++;
        }
        if (PQntuples(rows) == 0) {
            if (harness_scalar_ll(c, "SELECT count(*) FROM public.effects") >= RACE_EVENTS) {
                PQclear(rows);
                break;
            }
            harness_sleep_ms(20);
        }
        PQclear(rows);
    }
    PQfinish(c);
    return NULL;
}

Test(ledger_receive, racing_receivers_run_every_event_once)
{
    struct racer racers[RACERS] = {{0}};
    pthread_t threads[RACERS];
    int busy = 0;

    enqueue(RACE_EVENTS, NULL);
    for (int n = 0; n < RACERS; n++) {
        racers[n].worker = n;
        cr_assert_eq(pthread_create(&threads[n], NULL, race, &racers[n]), 0);
    }
    for (int n = 0; n < RACERS; n++) {
        pthread_join(threads[n], NULL);
        busy += racers[n].handled > 0;
    }
    cr_assert_eq(ll("SELECT count(*) FROM public.effects"), RACE_EVENTS);
    cr_assert_eq(ll("SELECT count(DISTINCT event_id) FROM public.effects"), RACE_EVENTS,
                 "an event ran twice");
    cr_assert_eq(ll("SELECT count(*) FROM outbox.processed_events WHERE handler = 'racer' "
                    "AND status = 'done'"),
                 RACE_EVENTS);
    cr_log_info("receivers that handled events: %d of %d", busy, RACERS);
}

/*
 * A receiver that dies holding its events: another gets them once their
 * lease runs out, not before, and the dead one's tokens are refused by
 * complete, fail and renew.
 */
Test(ledger_receive, a_crashed_receivers_events_go_to_another_and_its_tokens_are_refused)
{
    PGconn *other = helper_connect();
    PGresult *lost, *taken, *none;
    long long started;
    char *v;

    enqueue(3, NULL);
    lost = receive(conn, "mailer", 10, 2);
    cr_assert_eq(PQntuples(lost), 3);
    started = harness_now_ms();
    none = receive(other, "mailer", 10, 30);
    cr_assert_eq(PQntuples(none), 0, "held by a live claim");
    PQclear(none);

    taken = receive_within(other, "mailer", 10, 30, 10000);
    cr_assert_eq(PQntuples(taken), 3, "the crashed receiver's events are taken over");
    cr_assert_geq(harness_now_ms() - started, 1500, "not before the lease ran out");
    for (int i = 0; i < 3; i++) {
        cr_assert_str_neq(PQgetvalue(taken, i, 1), PQgetvalue(lost, i, 1), "a new token");
    }
    for (int i = 0; i < 3; i++) {
        const char *id = PQgetvalue(lost, i, 0), *stale = PQgetvalue(lost, i, 1);

        cr_assert(!complete(conn, "mailer", lost, i), "a stale token cannot complete");
        v = scalar(conn, "SELECT outcome FROM outbox.fail('%s', 'mailer', '%s', 'timeout')", id,
                   stale);
        cr_assert_str_eq(v, "stale", "a stale token cannot fail");
        free(v);
        v = scalar(conn, "SELECT outbox.renew('%s', 'mailer', '%s', 30)", id, stale);
        cr_assert_str_eq(v, "f", "a stale token cannot renew");
        free(v);
    }
    for (int i = 0; i < 3; i++) {
        cr_assert(complete(other, "mailer", taken, i), "the new owner completes");
    }
    cr_assert_eq(ll("SELECT count(*) FROM outbox.processed_events WHERE attempts > 0"), 0,
                 "a stale fail counted nothing");
    PQclear(lost);
    PQclear(taken);
    PQfinish(other);
}

Test(ledger_receive, a_failure_retries_after_retry_at_and_dead_letters_at_max_attempts)
{
    PGresult *rows, *none;
    struct relay_env env;
    struct ctl_run r;
    char *v, *id;

    enqueue(1, NULL);
    rows = receive(conn, "mailer", 10, 30);
    cr_assert_eq(PQntuples(rows), 1);
    id = strdup(PQgetvalue(rows, 0, 0));
    v = scalar(conn,
               "SELECT outcome || ' ' || attempts || ' ' || (retry_at > now()) "
               "FROM outbox.fail('%s', 'mailer', '%s', 'smtp 451', NULL, 2, 1500, 1500)",
               id, PQgetvalue(rows, 0, 1));
    cr_assert_str_eq(v, "retry 1 true");
    free(v);
    PQclear(rows);
    none = receive(conn, "mailer", 10, 30);
    cr_assert_eq(PQntuples(none), 0, "backing off until retry_at");
    PQclear(none);

    rows = receive_within(conn, "mailer", 10, 30, 8000);
    cr_assert_eq(PQntuples(rows), 1, "retried after retry_at");
    cr_assert_str_eq(PQgetvalue(rows, 0, 0), id);
    cr_assert_str_eq(PQgetvalue(rows, 0, 3), "1", "its attempts so far");
    v = scalar(conn, "SELECT outcome FROM outbox.fail('%s', 'mailer', '%s', 'smtp 550', '%s', 2)",
               id, PQgetvalue(rows, 0, 1), PQgetvalue(rows, 0, 2));
    cr_assert_str_eq(v, "dead");
    free(v);
    PQclear(rows);
    none = receive_within(conn, "mailer", 10, 30, 2500);
    cr_assert_eq(PQntuples(none), 0, "dead: never handed out again");
    PQclear(none);
    cr_assert_eq(ll("SELECT count(*) FROM outbox.events"), 0,
                 "dead for every handler of the group: the row is finished");

    relay_env_init(&env, harness_db_url(), harness_nats_url(), "RCV", "rcv");
    relay_env_set(&env, "OUTBOX_BUS", "db");
    ctl_expect(&r, &env, 0, (const char *const[]){"dead", "list", "--json", NULL});
    cr_assert(strstr(r.out, "smtp 550") != NULL && strstr(r.out, id) != NULL, "%s", r.out);
    ctl_run_fini(&r);

    /* Requeued: due in the outbox again, handed out once more with its attempts back. */
    ctl_expect(&r, &env, 0, (const char *const[]){"dead", "requeue", "--handler", "mailer", NULL});
    ctl_run_fini(&r);
    rows = receive_within(conn, "mailer", 10, 30, 5000);
    cr_assert_eq(PQntuples(rows), 1, "requeued: received again");
    cr_assert_str_eq(PQgetvalue(rows, 0, 0), id);
    cr_assert_str_eq(PQgetvalue(rows, 0, 3), "0");
    cr_assert(complete(conn, "mailer", rows, 0));
    PQclear(rows);
    relay_env_fini(&env);
    free(id);
}

/* Each handler of the group gets each event once; the row stays until all are done. */
Test(ledger_receive, every_handler_gets_each_event_and_the_row_waits_for_all)
{
    PGresult *a, *b, *none;

    enqueue(4, NULL);
    a = receive(conn, "audit", 10, 30);
    cr_assert_eq(PQntuples(a), 4);
    b = receive_within(conn, "billing", 10, 30, 5000);
    cr_assert_eq(PQntuples(b), 4, "the second handler gets them too");
    for (int i = 0; i < 4; i++) {
        cr_assert(complete(conn, "audit", a, i));
    }
    none = receive_within(conn, "audit", 10, 30, 2500);
    cr_assert_eq(PQntuples(none), 0, "done for audit");
    PQclear(none);
    cr_assert_eq(ll("SELECT count(*) FROM outbox.events"), 4, "billing is not done yet");
    for (int i = 0; i < 4; i++) {
        cr_assert(complete(conn, "billing", b, i));
    }
    none = receive_within(conn, "audit", 10, 30, 2500);
    cr_assert_eq(PQntuples(none), 0);
    PQclear(none);
    cr_assert_eq(ll("SELECT count(*) FROM outbox.events"), 0, "done for both: finished");
    PQclear(a);
    PQclear(b);
}

Test(ledger_receive, an_ordered_aggregate_comes_in_number_order_only)
{
    PGresult *rows;

    harness_exec(conn, "SELECT outbox.set_ordering(true)");
    enqueue(3, "'8c3e3f4e-3f44-4a4c-9a53-6b5e8f8d1c01'");
    for (int seq = 1; seq <= 3; seq++) {
        char want[4];
        PGresult *none;

        rows = receive_within(conn, "mailer", 10, 30, 8000);
        snprintf(want, sizeof(want), "%d", seq);
        cr_assert_eq(PQntuples(rows), 1, "number %d alone", seq);
        cr_assert_str_eq(PQgetvalue(rows, 0, 4), want);
        none = receive_within(conn, "mailer", 10, 30, 1500);
        cr_assert_eq(PQntuples(none), 0, "nothing after %d before it is done", seq);
        PQclear(none);
        cr_assert(complete(conn, "mailer", rows, 0));
        PQclear(rows);
    }
}

/*
 * A successor waiting behind an ordered head that receive() finishes is
 * woken without a lease of its own: made due (pending, no lease token, no
 * leased_until), free for the next lease, which hands it out at once (in
 * the same call, whose next pass takes it). A wake-up that leased it to the
 * call would have had to give it back, a second write per row for nothing.
 */
Test(ledger_receive, a_finished_head_s_successor_is_made_due_not_leased_and_comes_at_once)
{
    PGresult *head, *none, *rows;
    char *first;

    harness_exec(conn, "SELECT outbox.set_ordering(true)");
    enqueue(1, "'5d0c4f61-2a7e-4b8f-9f0e-3c1a2b4d5e6f'");
    head = receive(conn, "mailer", 10, 30);
    cr_assert_eq(PQntuples(head), 1);
    cr_assert_str_eq(PQgetvalue(head, 0, 4), "1");
    enqueue(1, "'5d0c4f61-2a7e-4b8f-9f0e-3c1a2b4d5e6f'");
    none = receive(conn, "mailer", 10, 30);
    cr_assert_eq(PQntuples(none), 0, "number 2 waits while number 1 is out");
    PQclear(none);
    cr_assert_eq(ll("SELECT count(*) FROM outbox.events WHERE aggregate_seq = 2 "
                    "AND last_error = 'waiting_for_head'"),
                 1, "number 2 waits for its head in the row lease");
    /* As a row that has waited long: its own next look is far off, so only
     * the head's wake-up makes it due. */
    harness_exec(conn, "UPDATE outbox.events SET next_attempt_at = now() + interval '1 hour' "
                       "WHERE aggregate_seq = 2");
    cr_assert(complete(conn, "mailer", head, 0));
    PQclear(head);

    /* Every write to an outbox row from here on, as the row was after it. */
    harness_exec(conn, "CREATE TABLE public.row_writes (n bigserial, seq bigint, status text, "
                       "token_set boolean, until_set boolean, due boolean)");
    harness_exec(conn, "CREATE FUNCTION public.log_row_write() RETURNS trigger LANGUAGE plpgsql "
                       "AS $$BEGIN INSERT INTO public.row_writes (seq, status, token_set, "
                       "until_set, due) VALUES (NEW.aggregate_seq, NEW.status, "
                       "NEW.lease_token IS NOT NULL, NEW.leased_until IS NOT NULL, "
                       "NEW.next_attempt_at <= now()); RETURN NULL; END$$");
    harness_exec(conn, "CREATE TRIGGER log_row_write AFTER UPDATE ON outbox.events "
                       "FOR EACH ROW EXECUTE FUNCTION public.log_row_write()");

    /* Number 1 comes back done (the row is finished) and wakes number 2. */
    rows = receive_within(conn, "mailer", 10, 30, 8000);
    cr_assert_eq(PQntuples(rows), 1, "number 2 comes in the call that finishes number 1");
    cr_assert_str_eq(PQgetvalue(rows, 0, 4), "2");
    cr_assert_eq(ll("SELECT count(*) FROM outbox.events WHERE aggregate_seq = 1"), 0,
                 "number 1 is finished");
    first = scalar(conn, "SELECT concat_ws(' ', status, token_set, until_set, due) "
                         "FROM public.row_writes WHERE seq = 2 ORDER BY n LIMIT 1");
    cr_assert_str_eq(first, "pending f f t",
                     "the wake-up makes number 2 due, leased to no one "
                     "(status, lease_token set, leased_until set, due)");
    free(first);
    cr_assert_eq(ll("SELECT count(*) FROM public.row_writes WHERE seq = 2 AND status = 'leased'"),
                 1, "number 2 is leased once: by the lease that hands it out");
    cr_assert(complete(conn, "mailer", rows, 0));
    PQclear(rows);
}

Test(ledger_receive, bad_arguments_are_refused_naming_them)
{
    expect_refused(conn, "SELECT * FROM outbox.receive('no spaces', 10, 30)", "22023",
                   "handler 'no spaces'");
    expect_refused(conn, "SELECT * FROM outbox.receive(NULL, 10, 30)", "22023", "handler NULL");
    expect_refused(conn, "SELECT * FROM outbox.receive('mailer', 0, 30)", "22023",
                   "max 0 is outside 1 to 1000");
    expect_refused(conn, "SELECT * FROM outbox.receive('mailer', 1001, 30)", "22023", "max 1001");
    expect_refused(conn, "SELECT * FROM outbox.receive('mailer', 10, 0)", "22023",
                   "lease_seconds 0 is outside 1 to 86400");
    expect_refused(conn, "SELECT * FROM outbox.receive('mailer', NULL, 30)", "22023", "max NULL");
    harness_exec(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ");
    expect_refused(conn, "SELECT * FROM outbox.receive('mailer', 10, 30)", "25001",
                   "read committed");
    harness_exec(conn, "ROLLBACK");
    cr_assert_eq(ll("SELECT count(*) FROM outbox.handlers"), 0, "a refused call wrote nothing");
}
