/* SPDX-License-Identifier: MIT */
/*
 * test_bus_nats.c - the relay's bus against a real nats-server: what lands
 * in the stream (body, exact headers), dedup by Nats-Msg-Id, ExpectStream,
 * how each failure is classified, and what a stopped, killed or missing
 * server does to a batch. Each test uses its own stream and prefix.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <nats/nats.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bus/bus.h"
#include "bus/bus_nats.h"
#include "bus/raw_publish.h"
#include "bus/stream.h"
#include "harness.h"
#include "outbox/worker.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define MAX_BATCH 64
#define BODY      "{\"id\":\"x\",\"payload\":{}}"
#define TIME      "2026-11-29T09:41:56.123Z"
#define AGG       "0b7d1a52-8f64-4c1e-9a55-2a3f1e4b6c7d"
#define TRACE     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
#define SOURCE    "test-source"

struct batch {
    size_t count;
    char ids[MAX_BATCH][48];
    char subject[128];
    struct obx_bus_message msgs[MAX_BATCH];
    struct obx_publish_result results[MAX_BATCH];
};

/* ---- log capture ---- */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_text[32768];
static size_t log_len;

static void
capture(void *ctx, outbox_log_level level, const char *line)
{
    (void)ctx;
    (void)level;
    pthread_mutex_lock(&log_mu);
    log_len += (size_t)snprintf(log_text + log_len, sizeof(log_text) - log_len, "%s\n", line);
    if (log_len >= sizeof(log_text)) {
        log_len = sizeof(log_text) - 1;
    }
    pthread_mutex_unlock(&log_mu);
}

static int
logged(const char *needle)
{
    int found;

    pthread_mutex_lock(&log_mu);
    found = strstr(log_text, needle) != NULL;
    pthread_mutex_unlock(&log_mu);
    return found;
}

/* 1 if `needle` was logged at least twice. */
static int
logged_twice(const char *needle)
{
    const char *first;
    int found;

    pthread_mutex_lock(&log_mu);
    first = strstr(log_text, needle);
    found = first != NULL && strstr(first + 1, needle) != NULL;
    pthread_mutex_unlock(&log_mu);
    return found;
}

static void
setup(void)
{
    outbox_set_logger(capture, NULL, OUTBOX_LOG_DEBUG);
}

static void
setup_exclusive(void)
{
    harness_servers_exclusive();
    setup();
}

/* ---- helpers ---- */

static struct obx_bus *
bus_open_with(enum obx_bus_kind kind, const char *url, const char *stream, int timeout_ms,
              int window)
{
    struct obx_bus_options o;
    struct obx_bus *bus = NULL;
    outbox_error err = {0};

    obx_bus_options_init(&o);
    o.kind = kind;
    o.url = url;
    o.stream = stream;
    o.ce_source = SOURCE;
    o.name = "test-bus";
    o.connect_timeout_ms = 2000;
    o.publish_timeout_ms = timeout_ms;
    o.max_in_flight = window;
    cr_assert_eq(obx_bus_open(&o, &bus, &err), OUTBOX_OK, "open: %s", err.message);
    return bus;
}

/* A fresh stream `name` capturing `prefix`.>, and a JetStream bus expecting it. */
static struct obx_bus *
js_bus(const char *name, const char *prefix, int timeout_ms, int window)
{
    struct obx_bus *bus =
        bus_open_with(OBX_BUS_JETSTREAM, harness_nats_url(), name, timeout_ms, window);
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    struct obx_stream_options so;
    outbox_error err = {0};

    /* A server from outside may keep streams from an earlier run. */
    cr_assert_eq(natsConnection_ConnectTo(&nc, harness_nats_url()), NATS_OK);
    cr_assert_eq(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    js_DeleteStream(js, name, NULL, NULL);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    obx_stream_options_init(&so);
    so.name = name;
    so.subjects_prefix = prefix;
    cr_assert_eq(obx_stream_ensure(bus, &so, &err), OUTBOX_OK, "stream: %s", err.message);
    return bus;
}

/* `count` messages on {prefix}.movie.logged, ids {tag}-{i}; odd ones carry a traceparent. */
static void
batch_fill(struct batch *b, const char *prefix, const char *tag, size_t count)
{
    cr_assert(count <= MAX_BATCH);
    memset(b, 0, sizeof(*b));
    b->count = count;
    snprintf(b->subject, sizeof(b->subject), "%s.movie.logged", prefix);
    for (size_t i = 0; i < count; i++) {
        snprintf(b->ids[i], sizeof(b->ids[i]), "%s-%zu", tag, i);
        b->msgs[i] = (struct obx_bus_message){
            .id = b->ids[i],
            .subject = b->subject,
            .body = BODY,
            .body_len = strlen(BODY),
            .ce_type = "movie.logged",
            .ce_time = TIME,
            .ce_subject = AGG,
            .traceparent = i % 2 ? TRACE : NULL,
        };
    }
}

static void
send_collect(struct obx_bus *bus, struct batch *b)
{
    outbox_error err = {0};

    cr_assert_eq(obx_bus_send(bus, b->msgs, b->count, &err), OUTBOX_OK, "send: %s", err.message);
    cr_assert_eq(obx_bus_collect(bus, b->results, b->count, &err), OUTBOX_OK, "collect: %s",
                 err.message);
}

static void
assert_all(const struct batch *b, enum obx_publish_outcome outcome, int duplicate)
{
    for (size_t i = 0; i < b->count; i++) {
        cr_assert_eq(b->results[i].outcome, outcome, "message %zu: outcome %d, reason \"%s\"", i,
                     (int)b->results[i].outcome, b->results[i].reason);
        if (outcome == OBX_PUBLISH_OK) {
            cr_assert_eq(b->results[i].duplicate, duplicate, "message %zu duplicate", i);
            cr_assert_str_empty(b->results[i].reason);
        } else {
            cr_assert_str_not_empty(b->results[i].reason, "message %zu needs a reason", i);
        }
    }
}

static uint64_t
stream_count(const char *name)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsStreamInfo *si = NULL;
    uint64_t n;

    cr_assert_eq(natsConnection_ConnectTo(&nc, harness_nats_url()), NATS_OK);
    cr_assert_eq(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    cr_assert_eq(js_GetStreamInfo(&si, js, name, NULL, NULL), NATS_OK, "stream %s", name);
    n = si->State.Msgs;
    jsStreamInfo_Destroy(si);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    return n;
}

static void
expect_header(natsMsg *m, const char *key, const char *want)
{
    const char *have = NULL;
    natsStatus s = natsMsgHeader_Get(m, key, &have);

    if (want == NULL) {
        cr_assert_eq(s, NATS_NOT_FOUND, "header %s should be absent, is \"%s\"", key,
                     have ? have : "");
        return;
    }
    cr_assert_eq(s, NATS_OK, "header %s missing", key);
    cr_assert_str_eq(have, want, "header %s", key);
}

/* The stored message `m` is exactly batch message `i`: subject, body and headers. */
static void
expect_stored(natsMsg *m, const struct batch *b, size_t i, int jetstream)
{
    const char **keys = NULL;
    int key_count = 0;
    int want_keys = 9 + (b->msgs[i].traceparent != NULL) + jetstream;

    cr_assert_str_eq(natsMsg_GetSubject(m), b->subject);
    cr_assert_eq(natsMsg_GetDataLength(m), (int)strlen(BODY));
    cr_assert_eq(memcmp(natsMsg_GetData(m), BODY, strlen(BODY)), 0);
    expect_header(m, "Nats-Msg-Id", b->ids[i]);
    expect_header(m, "Content-Type", "application/json");
    expect_header(m, "ce-datacontenttype", "application/json");
    expect_header(m, "ce-specversion", "1.0");
    expect_header(m, "ce-id", b->ids[i]);
    expect_header(m, "ce-type", "movie.logged");
    expect_header(m, "ce-source", SOURCE);
    expect_header(m, "ce-time", TIME);
    expect_header(m, "ce-subject", AGG);
    expect_header(m, "traceparent", b->msgs[i].traceparent);
    /* JetStream keeps the ExpectStream header we sent along; nothing else may be there. */
    expect_header(m, "Nats-Expected-Stream", jetstream ? "BUS_HDR" : NULL);
    cr_assert_eq(natsMsgHeader_Keys(m, &keys, &key_count), NATS_OK);
    free((void *)keys);
    cr_assert_eq(key_count, want_keys, "message %zu has %d headers, want %d", i, key_count,
                 want_keys);
}

/* ---- JetStream ---- */

TestSuite(jetstream_bus, .init = setup, .timeout = 120);

Test(jetstream_bus, stores_each_message_with_its_body_and_exact_headers)
{
    struct obx_bus *bus = js_bus("BUS_HDR", "bushdr", 5000, 16);
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    struct batch b;

    batch_fill(&b, "bushdr", "hdr", 6);
    send_collect(bus, &b);
    assert_all(&b, OBX_PUBLISH_OK, 0);
    cr_assert_eq(stream_count("BUS_HDR"), 6);
    cr_assert_eq(natsConnection_ConnectTo(&nc, harness_nats_url()), NATS_OK);
    cr_assert_eq(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    for (uint64_t seq = 1; seq <= 6; seq++) {
        natsMsg *m = NULL;

        cr_assert_eq(js_GetMsg(&m, js, "BUS_HDR", seq, NULL, NULL), NATS_OK, "seq %d", (int)seq);
        expect_stored(m, &b, (size_t)seq - 1, 1); /* one batch lands in send order */
        natsMsg_Destroy(m);
    }
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    obx_bus_close(bus);
}

Test(jetstream_bus, acks_republished_ids_as_duplicates_without_storing_them_again)
{
    struct obx_bus *bus = js_bus("BUS_DUP", "busdup", 5000, 16);
    struct batch b;

    batch_fill(&b, "busdup", "dup", 40);
    send_collect(bus, &b);
    assert_all(&b, OBX_PUBLISH_OK, 0);
    send_collect(bus, &b);
    assert_all(&b, OBX_PUBLISH_OK, 1);
    cr_assert_eq(stream_count("BUS_DUP"), 40);
    obx_bus_close(bus);
}

Test(jetstream_bus, publishes_a_batch_larger_than_its_window)
{
    struct obx_bus *bus = js_bus("BUS_WIN", "buswin", 5000, 3);
    struct batch b;

    batch_fill(&b, "buswin", "win", MAX_BATCH);
    send_collect(bus, &b);
    assert_all(&b, OBX_PUBLISH_OK, 0);
    cr_assert_eq(stream_count("BUS_WIN"), MAX_BATCH);
    obx_bus_close(bus);
}

Test(jetstream_bus, never_finishes_a_message_that_another_stream_captures)
{
    struct obx_bus *bus = js_bus("BUS_EXP", "busexp", 5000, 16);
    struct obx_stream_options so;
    outbox_error err = {0};
    struct batch b;

    obx_stream_options_init(&so);
    so.name = "BUS_OTHER";
    so.subjects_prefix = "busother";
    cr_assert_eq(obx_stream_ensure(bus, &so, &err), OUTBOX_OK, "%s", err.message);
    batch_fill(&b, "busother", "exp", 4);
    send_collect(bus, &b);
    assert_all(&b, OBX_PUBLISH_UNAVAILABLE, 0);
    cr_assert(strstr(b.results[0].reason, "10060") != NULL, "%s", b.results[0].reason);
    cr_assert_eq(stream_count("BUS_OTHER"), 0, "ExpectStream must keep it out of BUS_OTHER");
    obx_bus_close(bus);
}

Test(jetstream_bus, reports_a_subject_no_stream_captures_as_unavailable)
{
    struct obx_bus *bus = js_bus("BUS_NONE", "busnone", 5000, 16);
    struct batch b;

    batch_fill(&b, "nostreamhere", "none", 3);
    send_collect(bus, &b);
    assert_all(&b, OBX_PUBLISH_UNAVAILABLE, 0);
    cr_assert(strstr(b.results[0].reason, "no responders") != NULL, "%s", b.results[0].reason);
    obx_bus_close(bus);
}

Test(jetstream_bus, refuses_a_body_beyond_max_payload_without_publishing_it)
{
    struct obx_bus *bus = js_bus("BUS_BIG", "busbig", 5000, 16);
    size_t fits = obx_bus_max_payload(bus) - OBX_BUS_HEADER_BUDGET;
    char *body = malloc(fits + 1);
    struct batch b;

    cr_assert_eq(obx_bus_max_payload(bus), 1024 * 1024, "the harness server's default");
    memset(body, 'x', fits + 1);
    batch_fill(&b, "busbig", "big", 3);
    b.msgs[0].body = body;
    b.msgs[0].body_len = fits + 1;
    b.msgs[1].body = body;
    b.msgs[1].body_len = fits;
    send_collect(bus, &b);
    cr_assert_eq(b.results[0].outcome, OBX_PUBLISH_TOO_LARGE, "%s", b.results[0].reason);
    cr_assert(strstr(b.results[0].reason, "max_payload") != NULL, "%s", b.results[0].reason);
    cr_assert_eq(b.results[1].outcome, OBX_PUBLISH_OK, "%s", b.results[1].reason);
    cr_assert_eq(b.results[2].outcome, OBX_PUBLISH_OK, "%s", b.results[2].reason);
    cr_assert_eq(stream_count("BUS_BIG"), 2);
    cr_assert(obx_bus_is_connected(bus), "the server must not have dropped us");
    free(body);
    obx_bus_close(bus);
}

Test(jetstream_bus, rejects_a_header_value_with_a_line_break_without_publishing_it)
{
    struct obx_bus *bus = js_bus("BUS_CRLF", "buscrlf", 5000, 16);
    struct batch b;

    batch_fill(&b, "buscrlf", "crlf", 2);
    b.msgs[0].traceparent = "00-x\r\nX-Injected: 1";
    send_collect(bus, &b);
    cr_assert_eq(b.results[0].outcome, OBX_PUBLISH_REJECTED, "%s", b.results[0].reason);
    cr_assert_eq(b.results[1].outcome, OBX_PUBLISH_OK, "%s", b.results[1].reason);
    cr_assert_eq(stream_count("BUS_CRLF"), 1);
    obx_bus_close(bus);
}

Test(jetstream_bus, refuses_a_second_send_before_collect_and_a_wrong_count)
{
    struct obx_bus *bus = js_bus("BUS_API", "busapi", 5000, 16);
    outbox_error err = {0};
    struct batch b;

    batch_fill(&b, "busapi", "api", 2);
    cr_assert_eq(obx_bus_send(bus, b.msgs, 2, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_eq(obx_bus_send(bus, b.msgs, 2, &err), OUTBOX_EINVAL);
    cr_assert_eq(obx_bus_collect(bus, b.results, 1, NULL), OUTBOX_EINVAL);
    cr_assert_eq(obx_bus_collect(bus, b.results, 2, NULL), OUTBOX_OK);
    assert_all(&b, OBX_PUBLISH_OK, 0);
    cr_assert_eq(obx_bus_collect(bus, b.results, 2, NULL), OUTBOX_EINVAL, "nothing in flight");
    obx_bus_close(bus);
}

Test(jetstream_bus, closes_cleanly_with_a_batch_in_flight)
{
    struct obx_bus *bus = js_bus("BUS_CLOSE", "busclose", 5000, 16);
    struct batch b;

    batch_fill(&b, "busclose", "close", MAX_BATCH);
    cr_assert_eq(obx_bus_send(bus, b.msgs, b.count, NULL), OUTBOX_OK);
    obx_bus_close(bus); /* ASan reports anything left behind */
    obx_bus_close(NULL);
}

Test(jetstream_bus, logs_that_it_connected_without_the_password)
{
    char url[128];
    struct obx_bus *bus;

    snprintf(url, sizeof(url), "nats://relay:s3cret@127.0.0.1:%d", harness_nats_port());
    bus = bus_open_with(OBX_BUS_JETSTREAM, url, "BUS_LOG", 5000, 16);
    cr_assert(logged("nats connected url=nats://127.0.0.1:"), "%s", log_text);
    cr_assert(!logged("s3cret") && !logged("relay:"), "%s", log_text);
    obx_bus_close(bus);
}

Test(jetstream_bus, measures_the_raw_baseline_and_fails_when_nothing_acks)
{
    struct obx_bus *bus = js_bus("BUS_RAW", "busraw", 5000, 16);
    const char *url = harness_nats_url();
    outbox_error err = {0};
    double eps = 0;

    cr_assert_eq(obx_raw_publish_rate(url, "BUS_RAW", "busraw", 500, 400, 64, &eps, &err),
                 OUTBOX_OK, "%s", err.message);
    cr_assert_gt(eps, 0);
    cr_assert_eq(stream_count("BUS_RAW"), 500);
    cr_assert_eq(obx_raw_publish_rate(url, "BUS_RAW", "busnone", 10, 400, 64, &eps, NULL),
                 OUTBOX_EUNAVAILABLE);
    obx_bus_close(bus);
}

/* ---- core NATS ---- */

TestSuite(core_bus, .init = setup, .timeout = 120);

Test(core_bus, delivers_messages_to_a_subscriber_once_collected)
{
    struct obx_bus *bus = bus_open_with(OBX_BUS_NATS_CORE, harness_nats_url(), NULL, 5000, 16);
    natsConnection *nc = NULL;
    natsSubscription *sub = NULL;
    struct batch b;

    cr_assert_eq(natsConnection_ConnectTo(&nc, harness_nats_url()), NATS_OK);
    cr_assert_eq(natsConnection_SubscribeSync(&sub, nc, "buscore.>"), NATS_OK);
    cr_assert_eq(natsConnection_Flush(nc), NATS_OK, "the server must know the subscription");
    batch_fill(&b, "buscore", "core", 5);
    send_collect(bus, &b);
    assert_all(&b, OBX_PUBLISH_OK, 0);
    for (size_t i = 0; i < b.count; i++) {
        natsMsg *m = NULL;

        cr_assert_eq(natsSubscription_NextMsg(&m, sub, 2000), NATS_OK, "message %zu", i);
        expect_stored(m, &b, i, 0);
        natsMsg_Destroy(m);
    }
    natsSubscription_Destroy(sub);
    natsConnection_Destroy(nc);
    obx_bus_close(bus);
}

/* ---- servers that are down, stopped or restarted ---- */

static int
closed_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd); /* nothing listens there now */
    return ntohs(a.sin_port);
}

static outbox_status
open_timed(const char *url, int connect_timeout_ms, long long *elapsed_ms, struct obx_bus **bus)
{
    struct obx_bus_options o;
    long long start = harness_now_ms();
    outbox_status st;

    obx_bus_options_init(&o);
    o.url = url;
    o.connect_timeout_ms = connect_timeout_ms;
    st = obx_bus_open(&o, bus, NULL);
    *elapsed_ms = harness_now_ms() - start;
    return st;
}

TestSuite(an_unreachable_server, .init = setup, .timeout = 120);

Test(an_unreachable_server, fails_to_open_at_once_when_nothing_listens)
{
    char url[64];
    struct obx_bus *bus = NULL;
    long long elapsed;

    snprintf(url, sizeof(url), "nats://127.0.0.1:%d", closed_port());
    cr_assert_eq(open_timed(url, 2000, &elapsed, &bus), OUTBOX_EUNAVAILABLE);
    cr_assert_null(bus, "no bus on failure");
    cr_assert_lt(elapsed, 2000, "took %lld ms", elapsed);
}

TestSuite(a_faulty_server, .init = setup_exclusive, .timeout = 120);

Test(a_faulty_server, fails_to_open_within_the_connect_timeout_while_stopped)
{
    struct obx_bus *bus = NULL;
    long long elapsed;

    harness_nats_kill(SIGSTOP);
    cr_assert_eq(open_timed(harness_nats_url(), 500, &elapsed, &bus), OUTBOX_EUNAVAILABLE);
    harness_nats_kill(SIGCONT);
    cr_assert_null(bus);
    cr_assert(elapsed >= 400 && elapsed < 2500, "took %lld ms", elapsed);
}

Test(a_faulty_server, gives_up_within_the_publish_timeout_when_stopped_and_recovers)
{
    struct obx_bus *bus = js_bus("BUS_STOP", "busstop", 1000, 8);
    struct batch before, after;
    long long start, collected;

    batch_fill(&before, "busstop", "before", 32); /* four windows: send must not hang either */
    harness_nats_kill(SIGSTOP);
    start = harness_now_ms();
    cr_assert_eq(obx_bus_send(bus, before.msgs, before.count, NULL), OUTBOX_OK);
    collected = harness_now_ms();
    cr_assert_eq(obx_bus_collect(bus, before.results, before.count, NULL), OUTBOX_OK);
    cr_assert_leq(harness_now_ms() - collected, 1000 + 1000, "collect took too long");
    cr_assert_leq(harness_now_ms() - start, 1000 + 1000, "send + collect took too long");
    harness_nats_kill(SIGCONT);
    assert_all(&before, OBX_PUBLISH_UNAVAILABLE, 0);

    HARNESS_WAIT_UNTIL(obx_bus_is_connected(bus), 30000);
    batch_fill(&after, "busstop", "after", 32);
    send_collect(bus, &after);
    assert_all(&after, OBX_PUBLISH_OK, 0); /* late acks of `before` must not show up here */
    send_collect(bus, &before);
    for (size_t i = 0; i < before.count; i++) {
        cr_assert_eq(before.results[i].outcome, OBX_PUBLISH_OK, "%s", before.results[i].reason);
    }
    cr_assert_eq(stream_count("BUS_STOP"), 64, "messages that landed late are deduplicated");
    obx_bus_close(bus);
}

Test(a_faulty_server, reconnects_by_itself_after_a_kill_and_restart)
{
    char url[128];
    struct obx_bus *bus;
    struct batch b;
    long long start;

    snprintf(url, sizeof(url), "nats://relay:s3cret@127.0.0.1:%d", harness_nats_port());
    obx_bus_close(js_bus("BUS_KILL", "buskill", 1000, 16)); /* a fresh stream */
    bus = bus_open_with(OBX_BUS_JETSTREAM, url, "BUS_KILL", 1000, 16);
    batch_fill(&b, "buskill", "one", 8);
    send_collect(bus, &b);
    assert_all(&b, OBX_PUBLISH_OK, 0);

    harness_nats_kill(SIGKILL);
    HARNESS_WAIT_UNTIL(!obx_bus_is_connected(bus), 5000);
    batch_fill(&b, "buskill", "two", 8);
    start = harness_now_ms();
    send_collect(bus, &b);
    cr_assert_lt(harness_now_ms() - start, 500, "a disconnected bus fails fast");
    assert_all(&b, OBX_PUBLISH_UNAVAILABLE, 0);

    harness_nats_start();
    HARNESS_WAIT_UNTIL(obx_bus_is_connected(bus), 20000);
    send_collect(bus, &b);
    assert_all(&b, OBX_PUBLISH_OK, 0);
    cr_assert_eq(stream_count("BUS_KILL"), 16);
    cr_assert(logged("nats disconnected url=nats://127.0.0.1:"), "%s", log_text);
    cr_assert(logged("nats reconnected url=nats://127.0.0.1:"), "%s", log_text);
    cr_assert(!logged("s3cret"), "%s", log_text);
    obx_bus_close(bus);
}

Test(jetstream_bus, reopens_a_connection_nats_c_closed_for_good)
{
    struct obx_bus *bus = js_bus("BUS_REOPEN", "busreopen", 1000, 16);
    struct batch b;

    /* What nats.c does itself after the same auth error twice in a row. */
    natsConnection_Close(obx_bus_conn(bus));
    cr_assert(natsConnection_IsClosed(obx_bus_conn(bus)));
    HARNESS_WAIT_UNTIL(obx_bus_is_connected(bus), 10000);
    cr_assert(logged_twice("nats connected url="), "a second connection: %s", log_text);
    batch_fill(&b, "busreopen", "reopen", 4);
    send_collect(bus, &b);
    assert_all(&b, OBX_PUBLISH_OK, 0);
    HARNESS_WAIT_UNTIL(logged("nats connection closed, will reopen"), 5000);
    obx_bus_close(bus);
}
