/* SPDX-License-Identifier: MIT */
/*
 * test_cloudevents.c - the stream's messages are CloudEvents that a public
 * SDK no one here wrote reads and validates. Events are written by the C
 * writer (outbox_enqueue, outbox_enqueue_batch, with and without tenant,
 * data subject, trace and an occurred_at of its own) and by the SQL
 * writers (outbox.enqueue, outbox.enqueue_many), relayed by `outboxd relay`
 * to JetStream, then read back from the stream, headers and body, and fed
 * to check_events.mjs: the JavaScript SDK (npm `cloudevents`, pinned in
 * package-lock.json) parses each as a binary-mode message, validates it,
 * and its id, source, type, time, subject, datacontenttype, traceparent,
 * sequence (ce-sequence and Outbox-Aggregate-Seq: the row's aggregate_seq,
 * for the events written after ordering was switched on, absent before) and
 * data are compared with the row's. Installed and run by
 * run_check.sh; Node.js and npm come from scripts/install-deps stacks.
 * The same events POSTed by an `outboxd consume` http: handler to a local
 * endpoint are checked the same way, as HTTP requests.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <jansson.h>
#include <nats/nats.h>

#include "consume_test.h"
#include "harness.h"
#include "http_endpoint.h"
#include "outbox/outbox.h"
#include "relay_check.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define CE_SOURCE   "https://example.com/orders/eu-1"
#define TRACEPARENT "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

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

TestSuite(cloudevents, .init = setup, .fini = teardown, .timeout = 240);

/* An event of route movie.review.logged with a payload of its own; options when `full`. */
static outbox_event *
sample_event(int n, int full)
{
    outbox_event *ev = outbox_event_new();
    char payload[64];

    cr_assert_not_null(ev);
    snprintf(payload, sizeof(payload), "{\"n\": %d, \"stars\": 4.5, \"tags\": [\"a\"]}", n);
    cr_assert_eq(outbox_event_set_route(ev, "movie", "review.logged", NULL), OUTBOX_OK);
    cr_assert_eq(outbox_event_set_aggregate_id(ev, "0190A3B2-1C2D-7E3F-8A9B-0C1D2E3F4A5B", NULL),
                 OUTBOX_OK);
    cr_assert_eq(outbox_event_set_payload_json(ev, payload, strlen(payload), NULL), OUTBOX_OK);
    if (full) {
        cr_assert_eq(outbox_event_set_tenant_id(ev, "acme", NULL), OUTBOX_OK);
        cr_assert_eq(outbox_event_set_data_subject(ev, "acct-1", NULL), OUTBOX_OK);
        cr_assert_eq(outbox_event_set_traceparent(ev, TRACEPARENT, NULL), OUTBOX_OK);
        /* 2024-02-29T23:59:59.999Z: a leap day, the last millisecond. */
        cr_assert_eq(outbox_event_set_occurred_at_ms(ev, INT64_C(1709251199999), NULL), OUTBOX_OK);
    }
    return ev;
}

/* Records an event's id in `committed`, in the caller's transaction. */
static void
record(const char *id)
{
    const char *params[1] = {id};
    PGresult *res = PQexecParams(conn, "INSERT INTO committed VALUES ($1::uuid)", 1, NULL, params,
                                 NULL, NULL, 0);

    cr_assert_eq(PQresultStatus(res), PGRES_COMMAND_OK, "%s", PQresultErrorMessage(res));
    PQclear(res);
}

/* Five events through the C writer: two alone, three in one batch. */
static void
write_with_the_c_writer(void)
{
    outbox_event *batch[3];
    outbox_error err = {0};

    for (int i = 0; i < 2; i++) {
        outbox_event *ev = sample_event(i, i == 0);

        harness_exec(conn, "BEGIN");
        cr_assert_eq(outbox_enqueue(conn, ev, &err), OUTBOX_OK, "%s", err.message);
        record(outbox_event_id(ev));
        harness_exec(conn, "COMMIT");
        outbox_event_free(ev);
    }
    harness_exec(conn, "BEGIN");
    for (int i = 0; i < 3; i++) {
        batch[i] = sample_event(10 + i, i == 1);
    }
    cr_assert_eq(outbox_enqueue_batch(conn, batch, 3, &err), OUTBOX_OK, "%s", err.message);
    for (int i = 0; i < 3; i++) {
        record(outbox_event_id(batch[i]));
        outbox_event_free(batch[i]);
    }
    harness_exec(conn, "COMMIT");
}

/* Four events through the SQL writers: two enqueue() calls, an enqueue_many() of two. */
static void
write_with_the_sql_writers(void)
{
    harness_exec(conn, "INSERT INTO committed SELECT outbox.enqueue('movie', "
                       "'0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', 'review.logged', "
                       "'{\"stars\": 5, \"text\": \"caf\xc3\xa9 \\\"ok\\\"\"}')");
    harness_exec(conn, "INSERT INTO committed SELECT outbox.enqueue('order', "
                       "gen_random_uuid(), 'line.added', '{}', tenant_id => 'acme', "
                       "data_subject => 'acct-2', traceparent => '" TRACEPARENT "')");
    harness_exec(conn, "INSERT INTO committed SELECT unnest(outbox.enqueue_many('["
                       "{\"aggregate_type\": \"order\", \"aggregate_id\": "
                       "\"0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5c\", \"event_type\": \"placed\", "
                       "\"payload\": {\"total\": 12.5}}, "
                       "{\"aggregate_type\": \"order\", \"aggregate_id\": "
                       "\"0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5c\", \"event_type\": \"paid.twice\", "
                       "\"payload\": {\"n\": null}, \"tenant_id\": \"t 1\"}]'::jsonb))");
}

/* The rows as check_events.mjs reads them (its "rows"). */
static json_t *
rows_json(void)
{
    PGresult *res = PQexec(conn, "SELECT json_agg(json_build_object("
                                 "'id', id::text, "
                                 "'type', aggregate_type || '.' || event_type, "
                                 "'subject', aggregate_id::text, "
                                 "'occurred_at', envelope ->> 'occurred_at', "
                                 "'traceparent', envelope ->> 'traceparent', "
                                 "'sequence', aggregate_seq::text, "
                                 "'envelope', envelope::text))::text FROM outbox.events");
    json_error_t jerr;
    json_t *rows;

    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(res));
    rows = json_loads(PQgetvalue(res, 0, 0), 0, &jerr);
    cr_assert_not_null(rows, "%s", jerr.text);
    PQclear(res);
    return rows;
}

/* One stored message as {"headers": {...}, "body": text}. */
static json_t *
message_json(natsMsg *m)
{
    json_t *headers = json_object(), *out;
    const char **keys = NULL;
    int count = 0;

    cr_assert_eq(natsMsgHeader_Keys(m, &keys, &count), NATS_OK);
    for (int k = 0; k < count; k++) {
        const char **values = NULL;
        int value_count = 0;

        cr_assert_eq(natsMsgHeader_Values(m, keys[k], &values, &value_count), NATS_OK);
        cr_assert_eq(value_count, 1, "header %s appears %d times", keys[k], value_count);
        json_object_set_new(headers, keys[k], json_string(values[0]));
        free((void *)values);
    }
    free((void *)keys);
    out = json_pack("{s:o, s:s%}", "headers", headers, "body", natsMsg_GetData(m),
                    (size_t)natsMsg_GetDataLength(m));
    cr_assert_not_null(out, "a body that is not UTF-8");
    return out;
}

/* Every message of `stream`, from sequence 1, as check_events.mjs reads them ("messages"). */
static json_t *
stream_messages_json(const char *stream)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsStreamInfo *info = NULL;
    jsErrCode code = 0;
    json_t *messages = json_array();

    cr_assert_eq(natsConnection_ConnectTo(&nc, harness_nats_url()), NATS_OK);
    cr_assert_eq(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    cr_assert_eq(js_GetStreamInfo(&info, js, stream, NULL, &code), NATS_OK, "error %d", (int)code);
    for (uint64_t seq = info->State.FirstSeq; seq <= info->State.LastSeq; seq++) {
        natsMsg *m = NULL;

        cr_assert_eq(js_GetMsg(&m, js, stream, seq, NULL, &code), NATS_OK, "message %llu: error %d",
                     (unsigned long long)seq, (int)code);
        json_array_append_new(messages, message_json(m));
        natsMsg_Destroy(m);
    }
    jsStreamInfo_Destroy(info);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    return messages;
}

/* Runs run_check.sh on `input`; returns its one-line JSON verdict. */
static json_t *
check_with_the_sdk(json_t *input)
{
    char path[512];
    char *argv[] = {OBX_SOURCE_DIR "/tests/integration/cloudevents/run_check.sh", OBX_BIN_DIR "/..",
                    path, NULL};
    struct harness_proc p;
    json_error_t jerr;
    json_t *verdict = NULL;
    const char *last = NULL;
    char *log;
    int status;

    snprintf(path, sizeof(path), "%s/../cloudevents-input-%d.json", OBX_BIN_DIR, (int)getpid());
    cr_assert_eq(json_dump_file(input, path, JSON_COMPACT), 0, "cannot write %s", path);
    harness_spawn(&p, argv, NULL);
    status = harness_proc_wait(&p, 200 * 1000);
    if (status == -1) {
        harness_proc_kill(&p);
    }
    unlink(path);
    log = harness_proc_log(&p);
    cr_log_info("the CloudEvents SDK's check:\n%s", log);
    /* The verdict is the last line that is a JSON object (npm may print before it). */
    for (const char *at = log; at != NULL && *at != '\0';) {
        if (*at == '{') {
            last = at;
        }
        at = strchr(at, '\n');
        at = at != NULL ? at + 1 : NULL;
    }
    if (last != NULL) {
        verdict = json_loads(last, JSON_DISABLE_EOF_CHECK, &jerr);
    }
    cr_assert(status == 0 || status == 1, "run_check.sh exited %d:\n%s", status, log);
    cr_assert_not_null(verdict, "no verdict in:\n%s", log);
    free(log);
    return verdict;
}

Test(cloudevents, every_message_of_the_stream_is_a_cloudevent_the_sdk_validates_as_its_row)
{
    struct relay_env env;
    struct harness_proc relay;
    json_t *input, *verdict, *failures;
    size_t i;
    json_t *failure;
    long long events;

    write_with_the_c_writer();
    /* The SQL writers' events in an ordered schema: they carry ce-sequence, the C
     * writer's before the switch do not. */
    harness_exec(conn, "SELECT outbox.set_ordering(true)");
    write_with_the_sql_writers();
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(aggregate_seq) FROM outbox.events"), 4);
    events = harness_scalar_ll(conn, "SELECT count(*) FROM committed");
    cr_assert_eq(events, 9);

    relay_test_env(&env, "CE_SDK", "cesdk");
    relay_env_set(&env, "OUTBOX_RELAY_MODE", "mark");
    relay_env_set(&env, "OUTBOX_CE_SOURCE", CE_SOURCE);
    relay_test_start(&relay, &env, "cloudevents-1");
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    relay_test_stop(&relay, 10000);
    cr_assert_eq(relay_test_check(conn, "CE_SDK").stream, (size_t)events);

    input = json_pack("{s:s, s:o, s:o}", "source", CE_SOURCE, "rows", rows_json(), "messages",
                      stream_messages_json("CE_SDK"));
    cr_assert_not_null(input);
    verdict = check_with_the_sdk(input);
    failures = json_object_get(verdict, "failures");
    json_array_foreach(failures, i, failure)
    {
        cr_log_error("%s", json_string_value(failure));
    }
    cr_expect_eq(json_array_size(failures), 0, "the SDK found %zu problems",
                 json_array_size(failures));
    cr_expect_eq(json_integer_value(json_object_get(verdict, "checked")), events,
                 "the SDK checked every event");
    cr_log_info("checked %lld events with cloudevents %s", events,
                json_string_value(json_object_get(verdict, "sdk")));
    json_decref(verdict);
    json_decref(input);
    relay_env_fini(&env);
}

/* The endpoint's requests as check_events.mjs reads them ("messages"). */
static json_t *
requests_json(struct http_endpoint *ep)
{
    json_t *messages = json_array();

    for (size_t i = 0; i < http_endpoint_count(ep); i++) {
        char *headers = http_endpoint_headers(ep, i), *body = http_endpoint_body(ep, i), *save;
        json_t *h = json_object();

        cr_assert(headers != NULL && body != NULL, "request %zu was not kept", i);
        for (char *line = strtok_r(headers, "\n", &save); line != NULL;
             line = strtok_r(NULL, "\n", &save)) {
            char *colon = strstr(line, ": ");

            if (colon != NULL) {
                *colon = '\0';
                json_object_set_new(h, line, json_string(colon + 2));
            }
        }
        json_array_append_new(messages, json_pack("{s:o, s:s}", "headers", h, "body", body));
        free(headers);
        free(body);
    }
    return messages;
}

Test(cloudevents, every_request_of_an_http_handler_is_a_cloudevent_the_sdk_validates_as_its_row)
{
    struct http_endpoint *ep = http_endpoint_start(0, NULL, NULL);
    struct harness_proc consumer;
    struct relay_env env;
    json_t *input, *verdict, *failures, *failure;
    char spec[200];
    const char *const handlers[] = {spec, NULL};
    long long events;
    size_t i;

    cr_assert_not_null(ep);
    write_with_the_c_writer();
    harness_exec(conn, "SELECT outbox.set_ordering(true)");
    write_with_the_sql_writers();
    events = harness_scalar_ll(conn, "SELECT count(*) FROM committed");
    snprintf(spec, sizeof(spec), "hook=http:http://127.0.0.1:%d/events", http_endpoint_port(ep));
    consume_test_env(&env, "db", "cehttp", "cehttp", "cehttp");
    relay_env_set(&env, "OUTBOX_CE_SOURCE", CE_SOURCE);
    consume_test_start(&consumer, &env, "cloudevents-http-1", handlers);
    HARNESS_WAIT_UNTIL(harness_scalar_ll(conn,
                                         "SELECT count(*) FROM outbox.processed_events "
                                         "WHERE handler = 'hook' AND status = 'done'") == events,
                       30000);
    consume_test_stop(&consumer, 10000);
    cr_assert_eq(http_endpoint_count(ep), (size_t)events);

    input = json_pack("{s:s, s:s, s:o, s:o}", "source", CE_SOURCE, "binding", "http", "rows",
                      rows_json(), "messages", requests_json(ep));
    cr_assert_not_null(input);
    verdict = check_with_the_sdk(input);
    failures = json_object_get(verdict, "failures");
    json_array_foreach(failures, i, failure)
    {
        cr_log_error("%s", json_string_value(failure));
    }
    cr_expect_eq(json_array_size(failures), 0, "the SDK found %zu problems",
                 json_array_size(failures));
    cr_expect_eq(json_integer_value(json_object_get(verdict, "checked")), events,
                 "the SDK checked every request");
    json_decref(verdict);
    json_decref(input);
    relay_env_fini(&env);
    http_endpoint_stop(ep);
}
