/* SPDX-License-Identifier: MIT */
/*
 * test_consume_http.c - the http: handler against a real local HTTP
 * endpoint (libmicrohttpd, started by the test), case by case through
 * its status-code contract: the CloudEvents request (binary and
 * structured mode), 2xx done, 429 and 503 with Retry-After (no attempt
 * spent), 410 dead-lettered at once, 500 and a timeout (an attempt
 * spent each), a refused connection (an outage: no attempt spent, the
 * other handlers go on), the bearer token file and extra headers, and
 * requests in flight at once as the endpoint sees them.
 *
 * Outcomes are read from the ledger and from what reached the endpoint.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "common/clock.h"
#include "consume_test.h"
#include "devserver/devserver_probe.h"
#include "harness.h"
#include "http_endpoint.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;
static char dir[64];
static struct http_endpoint *ep;

static void
setup(void)
{
    consume_test_suite_begin(&conn, dir);
    ep = NULL;
}

static void
teardown(void)
{
    http_endpoint_stop(ep);
    consume_test_suite_end(&conn, dir);
}

TestSuite(consume_http, .init = setup, .fini = teardown, .timeout = 120);

/* A consumer on the DB backend hosting `handlers`, with `max_attempts`. */
struct run {
    struct harness_proc consumer;
    struct relay_env env;
};

static void
run_start(struct run *r, const char *tag, const char *const handlers[], const char *max_attempts)
{
    consume_test_env(&r->env, "db", tag, tag, tag);
    relay_env_set(&r->env, "OUTBOX_MAX_ATTEMPTS", max_attempts);
    consume_test_start(&r->consumer, &r->env, "http-1", handlers);
}

static void
run_stop(struct run *r)
{
    consume_test_assert_running(&r->consumer, "the consumer");
    consume_test_stop(&r->consumer, 10000);
    relay_env_fini(&r->env);
}

static long long
ledger(const char *sql)
{
    return harness_scalar_ll(conn, sql);
}

static long long
done_count(void)
{
    return ledger("SELECT count(*) FROM outbox.processed_events WHERE handler = 'hook' "
                  "AND status = 'done'");
}

/* The spec of handler "hook" POSTing to the endpoint, with `options` ("" for none). */
static void
hook_spec(char *out, size_t cap, const char *options, int port)
{
    snprintf(out, cap, "hook=http%s:http://127.0.0.1:%d/events", options, port);
}

/* The endpoint (answering 204 until scripted otherwise) and handler "hook"'s spec for it. */
static void
start_endpoint(char *spec, size_t cap, const char *options)
{
    ep = http_endpoint_start(0, NULL, NULL);
    cr_assert_not_null(ep);
    hook_spec(spec, cap, options, http_endpoint_port(ep));
}

/* The one committed event's id. */
static void
only_event_id(char id[40])
{
    PGresult *res = PQexec(conn, "SELECT id FROM public.committed");

    cr_assert_eq(PQntuples(res), 1);
    snprintf(id, 40, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
}

static void
expect_header(size_t i, const char *name, const char *want)
{
    char *got = http_endpoint_header(ep, i, name);

    cr_expect(got != NULL && strcmp(got, want) == 0, "header %s: got \"%s\", want \"%s\"", name,
              got ? got : "(none)", want);
    free(got);
}

Test(consume_http, an_event_is_posted_as_a_binary_mode_cloudevent_and_a_2xx_marks_it_done)
{
    char spec[200], id[40], *body, *type, *time;
    const char *const handlers[] = {spec, NULL};
    struct run r;

    start_endpoint(spec, sizeof(spec), "");
    relay_test_enqueue(conn, 1);
    only_event_id(id);
    run_start(&r, "httpbin", handlers, "5");
    HARNESS_WAIT_UNTIL(done_count() == 1, 20000);
    run_stop(&r);

    cr_assert_eq(http_endpoint_count(ep), 1, "one POST for one event");
    expect_header(0, "ce-specversion", "1.0");
    expect_header(0, "ce-id", id);
    expect_header(0, "Idempotency-Key", id);
    expect_header(0, "ce-source", "pgoutbox");
    expect_header(0, "ce-type", "movie.review.logged");
    expect_header(0, "Content-Type", "application/json");
    expect_header(0, "ce-datacontenttype", "application/json");
    cr_expect_null(http_endpoint_header(ep, 0, "ce-sequence"), "an unordered event has none");
    type = http_endpoint_header(ep, 0, "ce-subject");
    time = http_endpoint_header(ep, 0, "ce-time");
    cr_expect(type != NULL && strlen(type) == 36, "ce-subject is the aggregate id");
    cr_expect(time != NULL && time[4] == '-', "ce-time is occurred_at");
    free(type);
    free(time);
    body = http_endpoint_body(ep, 0);
    cr_assert(body != NULL && strstr(body, id) != NULL && strstr(body, "\"payload\"") != NULL,
              "the body is the envelope: %s", body ? body : "(none)");
    free(body);
    cr_assert_eq(ledger("SELECT coalesce(sum(attempts), 0) FROM outbox.processed_events"), 0);
}

Test(consume_http, structured_mode_posts_one_cloudevents_json_object)
{
    char spec[200], id[40], *body;
    const char *const handlers[] = {spec, NULL};
    struct run r;

    start_endpoint(spec, sizeof(spec), "[mode=structured]");
    relay_test_enqueue(conn, 1);
    only_event_id(id);
    run_start(&r, "httpstr", handlers, "5");
    HARNESS_WAIT_UNTIL(done_count() == 1, 20000);
    run_stop(&r);

    expect_header(0, "Content-Type", "application/cloudevents+json; charset=utf-8");
    expect_header(0, "Idempotency-Key", id);
    cr_expect_null(http_endpoint_header(ep, 0, "ce-id"), "no ce-* headers in structured mode");
    body = http_endpoint_body(ep, 0);
    cr_assert_not_null(body);
    cr_expect(strstr(body, "\"specversion\":\"1.0\"") != NULL, "%s", body);
    cr_expect(strstr(body, "\"type\":\"movie.review.logged\"") != NULL, "%s", body);
    cr_expect(strstr(body, "\"datacontenttype\":\"application/json\"") != NULL, "%s", body);
    cr_expect(strstr(body, "\"data\":{") != NULL, "the data is a JSON value: %s", body);
    cr_expect(strstr(body, id) != NULL, "%s", body);
    free(body);
}

/* 429 and 503 with Retry-After: tried again after that delay, no attempt spent. */
static void
busy_then_done(int status, const char *tag)
{
    char spec[200];
    const char *const handlers[] = {spec, NULL};
    struct run r;
    long long gap;

    start_endpoint(spec, sizeof(spec), "");
    http_endpoint_script(ep, 1, status, "2", 0, 204, 0);
    relay_test_enqueue(conn, 1);
    run_start(&r, tag, handlers, "1"); /* a spent attempt would dead-letter it */
    HARNESS_WAIT_UNTIL(done_count() == 1, 20000);
    run_stop(&r);

    cr_assert_eq(http_endpoint_count(ep), 2);
    gap = http_endpoint_arrived_ms(ep, 1) - http_endpoint_arrived_ms(ep, 0);
    cr_expect_geq(gap, 1900, "%d with Retry-After: 2, tried again after %lld ms", status, gap);
    cr_assert_eq(ledger("SELECT coalesce(sum(attempts), 0) FROM outbox.processed_events"), 0,
                 "%d spent an attempt", status);
    cr_assert_eq(ledger("SELECT count(*) FROM outbox.dead_letters"), 0);
}

Test(consume_http, a_503_with_retry_after_is_retried_after_that_delay_spending_no_attempt)
{
    busy_then_done(503, "http503");
}

Test(consume_http, a_429_with_retry_after_is_retried_after_that_delay_spending_no_attempt)
{
    busy_then_done(429, "http429");
}

Test(consume_http, a_410_dead_letters_the_event_at_once)
{
    char spec[200];
    const char *const handlers[] = {spec, NULL};
    struct run r;

    start_endpoint(spec, sizeof(spec), "");
    http_endpoint_script(ep, 0, 0, NULL, 0, 410, 0);
    relay_test_enqueue(conn, 1);
    run_start(&r, "http410", handlers, "10");
    HARNESS_WAIT_UNTIL(
        ledger("SELECT count(*) FROM outbox.dead_letters WHERE handler = 'hook'") == 1, 20000);
    run_stop(&r);

    cr_assert_eq(http_endpoint_count(ep), 1, "a 410 event was POSTed again");
    cr_assert_eq(ledger("SELECT attempts FROM outbox.dead_letters"), 1);
    cr_assert_eq(ledger("SELECT count(*) FROM outbox.dead_letters WHERE reason LIKE '%410%'"), 1);
}

Test(consume_http, a_500_spends_an_attempt_each_time_until_dead_letters)
{
    char spec[200];
    const char *const handlers[] = {spec, NULL};
    struct run r;

    start_endpoint(spec, sizeof(spec), "");
    http_endpoint_script(ep, 0, 0, NULL, 0, 500, 0);
    relay_test_enqueue(conn, 1);
    run_start(&r, "http500", handlers, "3");
    HARNESS_WAIT_UNTIL(
        ledger("SELECT count(*) FROM outbox.dead_letters WHERE handler = 'hook'") == 1, 30000);
    run_stop(&r);

    cr_assert_eq(http_endpoint_count(ep), 3, "three attempts, three POSTs");
    cr_assert_eq(ledger("SELECT attempts FROM outbox.dead_letters"), 3);
    cr_assert_eq(ledger("SELECT count(*) FROM outbox.dead_letters WHERE reason LIKE '%500%'"), 1);
}

Test(consume_http, a_timeout_spends_an_attempt_and_the_event_is_tried_again)
{
    char spec[200];
    const char *const handlers[] = {spec, NULL};
    struct run r;

    start_endpoint(spec, sizeof(spec), "[timeout=1]");
    http_endpoint_script(ep, 1, 204, NULL, 3000, 204, 0); /* the first answer comes too late */
    relay_test_enqueue(conn, 1);
    run_start(&r, "httptmo", handlers, "5");
    HARNESS_WAIT_UNTIL(done_count() == 1, 30000);
    run_stop(&r);

    cr_assert_eq(ledger("SELECT attempts FROM outbox.processed_events WHERE handler = 'hook'"), 1,
                 "the timeout spent no attempt");
    cr_assert_eq(ledger("SELECT count(*) FROM outbox.dead_letters"), 0);
}

Test(consume_http, a_refused_connection_is_an_outage_spending_nothing_while_others_go_on)
{
    enum { EVENTS = 10 };
    char spec[200];
    const char *const handlers[] = {spec, CONSUME_EFFECT("audit"), NULL};
    int port = obx_dev_free_port(); /* nothing listens there yet */
    struct run r;

    hook_spec(spec, sizeof(spec), "", port);
    relay_test_enqueue(conn, EVENTS);
    run_start(&r, "httpout", handlers, "1"); /* a spent attempt would dead-letter */
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "audit") == EVENTS &&
                           harness_proc_log_contains(&r.consumer, "cannot reach its endpoint"),
                       20000);
    cr_assert_eq(done_count(), 0);
    cr_assert_eq(ledger("SELECT coalesce(sum(attempts), 0) FROM outbox.processed_events"), 0,
                 "a refused connection spent an attempt");
    cr_assert_eq(ledger("SELECT count(*) FROM outbox.dead_letters"), 0);

    ep = http_endpoint_start(port, NULL, NULL); /* the endpoint comes back */
    cr_assert_not_null(ep, "port %d taken meanwhile", port);
    HARNESS_WAIT_UNTIL(done_count() == EVENTS, 30000);
    run_stop(&r);
    consume_test_expect_exactly_once(conn, "audit");
    consume_test_expect_nothing_spent(conn);
}

Test(consume_http,
     the_token_file_and_extra_headers_go_with_every_request_and_the_token_is_never_logged)
{
    char spec[400], path[128];
    const char *const handlers[] = {spec, NULL};
    const char *token = "s3cr3t-T0KEN-4-http";
    struct run r;
    FILE *f;

    snprintf(path, sizeof(path), "%s/token", dir);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "%s\n", token);
    fclose(f);
    ep = http_endpoint_start(0, NULL, NULL);
    cr_assert_not_null(ep);
    snprintf(spec, sizeof(spec),
             "hook=http[token_file=%s,header=X-Tenant: eu-1]:http://127.0.0.1:%d/events", path,
             http_endpoint_port(ep));
    relay_test_enqueue(conn, 2);
    run_start(&r, "httptok", handlers, "5");
    HARNESS_WAIT_UNTIL(done_count() == 2, 20000);
    cr_assert(!harness_proc_log_contains(&r.consumer, token), "the token was logged");
    run_stop(&r);

    for (size_t i = 0; i < 2; i++) {
        expect_header(i, "Authorization", "Bearer s3cr3t-T0KEN-4-http");
        expect_header(i, "X-Tenant", "eu-1");
    }
}

Test(consume_http, requests_go_concurrently_up_to_the_in_flight_limit)
{
    enum { EVENTS = 20 };
    char spec[200];
    const char *const handlers[] = {spec, NULL};
    struct run r;
    int most;

    start_endpoint(spec, sizeof(spec), "[in_flight=6]");
    http_endpoint_script(ep, 0, 0, NULL, 0, 204, 300);
    relay_test_enqueue(conn, EVENTS);
    run_start(&r, "httpcc", handlers, "5");
    HARNESS_WAIT_UNTIL(done_count() == EVENTS, 30000);
    run_stop(&r);

    most = http_endpoint_max_in_flight(ep);
    cr_log_info("20 requests of 300 ms, in_flight=6: at most %d at the endpoint at once", most);
    cr_assert_geq(most, 3, "requests went one at a time (at most %d at once)", most);
    cr_assert_leq(most, 6, "%d requests in flight, past in_flight=6", most);
    cr_assert_eq(http_endpoint_count(ep), EVENTS, "an event was POSTed twice");
}

/*
 * Batches one after another reuse the connections the first one opened:
 * one per request in flight, whatever the gaps between batches (over
 * https, each new connection is a handshake).
 */
Test(consume_http, batches_one_after_another_reuse_the_connections_of_the_first)
{
    enum { WAVES = 6, PER_WAVE = 6 };
    char spec[200];
    const char *const handlers[] = {spec, NULL};
    struct run r;
    int opened;

    start_endpoint(spec, sizeof(spec), "[in_flight=6]");
    http_endpoint_script(ep, 0, 0, NULL, 0, 204, 50);
    run_start(&r, "httpkeep", handlers, "5");
    for (int wave = 1; wave <= WAVES; wave++) {
        relay_test_enqueue(conn, PER_WAVE);
        HARNESS_WAIT_UNTIL(done_count() == wave * PER_WAVE, 30000);
    }
    run_stop(&r);

    opened = http_endpoint_connections(ep);
    cr_log_info("%d waves of %d requests, in_flight=6: %d connections opened", WAVES, PER_WAVE,
                opened);
    cr_assert_eq(http_endpoint_count(ep), WAVES * PER_WAVE, "an event was POSTed twice");
    cr_assert_leq(opened, 6, "%d connections for in_flight=6: batches did not reuse them", opened);
}

Test(consume_http, a_bad_spec_is_refused_at_start_naming_the_option)
{
    const char *bad[][2] = {
        {"hook=http:ftp://example.com/x", "must be http://HOST"},
        {"hook=http[in_flight=0]:http://127.0.0.1:1/x", "in_flight=\"0\""},
        {"hook=http[mode=batch]:http://127.0.0.1:1/x", "mode=\"batch\""},
        {"hook=http[ca_file=/x]:http://127.0.0.1:1/x", "ca_file needs an https://"},
        {"hook=http[token_file=/nonexistent/t]:http://127.0.0.1:1/x", "token_file"},
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *const handlers[] = {bad[i][0], NULL};
        struct run r;

        consume_test_env(&r.env, "db", "httpbad", "httpbad", "httpbad");
        consume_test_start(&r.consumer, &r.env, "http-bad", handlers);
        cr_assert_eq(harness_proc_wait(&r.consumer, 20000), 2, "%s: not refused", bad[i][0]);
        cr_assert(harness_proc_log_contains(&r.consumer, bad[i][1]), "%s: the error lacks %s:\n%s",
                  bad[i][0], bad[i][1], harness_proc_log(&r.consumer));
        relay_env_fini(&r.env);
    }
}

/*
 * Events are claimed ahead of their requests (up to eight in-flight windows
 * more). With one request at a time, each 1.2 s, and a lease of 2 s, the
 * third and fourth events wait longer than their lease for their turn: each claim is
 * renewed while it waits, so it is never lost nor taken over, and every
 * event is POSTed once.
 */
Test(consume_http, claims_taken_ahead_are_renewed_while_they_wait_for_their_request)
{
    enum { EVENTS = 4 };
    char spec[200];
    const char *const handlers[] = {spec, NULL};
    struct run r;

    start_endpoint(spec, sizeof(spec), "[in_flight=1]");
    http_endpoint_script(ep, 0, 0, NULL, 0, 204, 1200);
    relay_test_enqueue(conn, EVENTS);
    consume_test_env(&r.env, "db", "httpahead", "httpahead", "httpahead");
    relay_env_set(&r.env, "OUTBOX_MAX_ATTEMPTS", "5");
    relay_env_set(&r.env, "OUTBOX_LEDGER_LEASE_SECONDS", "2");
    consume_test_start(&r.consumer, &r.env, "http-1", handlers);
    HARNESS_WAIT_UNTIL(done_count() == EVENTS, 30000);
    run_stop(&r);

    cr_assert_eq(http_endpoint_count(ep), EVENTS, "an event was POSTed twice");
    cr_assert_eq(http_endpoint_max_in_flight(ep), 1, "two requests at once with in_flight=1");
    cr_assert(!harness_proc_log_contains(&r.consumer, "claim lost"),
              "a claim taken ahead was lost while it waited");
    cr_assert_eq(ledger("SELECT coalesce(sum(attempts), 0) FROM outbox.processed_events"), 0);
}

/*
 * A batch that outlasts the feed's hold on its messages (the DB feed's
 * lease of 2 s, JetStream's ack_wait alike) keeps them: every third of it
 * the consumer says they are still in progress. With one request at a
 * time, each 1.2 s, the fourth event ends 4.8 s after the batch was
 * fetched; a second replica polling all along never leases one of them
 * again (no lease runs out), and each is POSTed once. A batch that ends
 * sooner says nothing: the short cases above send no in-progress at all.
 */
Test(consume_http, a_batch_outlasting_the_feeds_hold_keeps_its_messages_from_other_replicas)
{
    enum { EVENTS = 4 };
    char spec[200];
    const char *const handlers[] = {spec, NULL};
    struct run first, second;

    start_endpoint(spec, sizeof(spec), "[in_flight=1]");
    http_endpoint_script(ep, 0, 0, NULL, 0, 204, 1200);
    relay_test_enqueue(conn, EVENTS);
    consume_test_env(&first.env, "db", "httphold", "httphold", "httphold");
    relay_env_set(&first.env, "OUTBOX_LEASE_SECONDS", "2");
    relay_env_set(&first.env, "OUTBOX_RELAY_MODE", "mark");
    consume_test_start(&first.consumer, &first.env, "http-1", handlers);
    HARNESS_WAIT_UNTIL(http_endpoint_count(ep) >= 1, 20000);
    consume_test_env(&second.env, "db", "httphold", "httphold", "httphold");
    relay_env_set(&second.env, "OUTBOX_LEASE_SECONDS", "2");
    relay_env_set(&second.env, "OUTBOX_RELAY_MODE", "mark");
    consume_test_start(&second.consumer, &second.env, "http-2", handlers);
    HARNESS_WAIT_UNTIL(done_count() == EVENTS, 30000);
    run_stop(&second);
    run_stop(&first);

    cr_assert_eq(http_endpoint_count(ep), EVENTS, "an event was POSTed twice");
    cr_assert_eq(ledger("SELECT coalesce(sum(lease_expiries), 0) FROM outbox.events"), 0,
                 "a lease of the batch's messages ran out while the batch went on");
    cr_assert_eq(ledger("SELECT count(*) FROM outbox.events WHERE status = 'done'"), EVENTS,
                 "every message was acked by the replica that ran it");
}

/*
 * With one request at a time, the events after the first are claimed
 * ahead when the endpoint refuses the connection: those claims are given
 * back (released, due after the pause) with no attempt spent, and every
 * event is POSTed once the endpoint is back.
 */
Test(consume_http, claims_taken_ahead_are_given_back_spending_nothing_in_an_outage)
{
    enum { EVENTS = 6 };
    char spec[200];
    const char *const handlers[] = {spec, NULL};
    int port = obx_dev_free_port(); /* nothing listens there yet */
    struct run r;

    hook_spec(spec, sizeof(spec), "[in_flight=1]", port);
    relay_test_enqueue(conn, EVENTS);
    run_start(&r, "httpaheadout", handlers, "1"); /* a spent attempt would dead-letter */
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&r.consumer, "cannot reach its endpoint") &&
                           ledger("SELECT count(*) FROM outbox.processed_events") >= 3,
                       20000);
    cr_assert_eq(done_count(), 0);
    cr_assert_eq(ledger("SELECT coalesce(sum(attempts), 0) FROM outbox.processed_events"), 0,
                 "a claim given back in an outage spent an attempt");

    ep = http_endpoint_start(port, NULL, NULL); /* the endpoint comes back */
    cr_assert_not_null(ep, "port %d taken meanwhile", port);
    HARNESS_WAIT_UNTIL(done_count() == EVENTS, 30000);
    run_stop(&r);
    cr_assert_eq(ledger("SELECT count(*) FROM outbox.dead_letters"), 0);
    cr_assert_eq(ledger("SELECT coalesce(sum(attempts), 0) FROM outbox.processed_events"), 0);
    cr_assert_eq(http_endpoint_count(ep), EVENTS, "an event was POSTed twice");
}
