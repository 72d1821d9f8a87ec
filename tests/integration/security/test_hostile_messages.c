/* SPDX-License-Identifier: MIT */
/*
 * test_hostile_messages.c - messages that no relay sent, put on the stream
 * with a raw NATS client between good events (written through
 * outbox.enqueue and published by `outboxd relay`): no envelope, a forged
 * Nats-Msg-Id, oversized headers, a subject outside the convention, an
 * envelope whose id is not its Nats-Msg-Id. A JetStream consumer must
 * refuse each one with its reason (the log says which check and why, by
 * stream sequence; outbox_consumer_refused_total counts them), run no
 * handler for it (no effect and no ledger row for any id it carries),
 * terminate it (the server's MSG_TERMINATED advisory names its sequence,
 * and nothing is redelivered), and handle every good event before and
 * after it exactly once.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <nats/nats.h>

#include "consume_nats.h"
#include "consume_test.h"
#include "harness.h"
#include "http_get.h"
#include "js_conn_nats.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum {
    GOOD = 20,       /* good events before the hostile messages, and again after them */
    MAX_HOSTILE = 8, /* per test */
};

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

TestSuite(hostile_messages, .init = setup, .fini = teardown, .timeout = 180);

/* One message a relay would never send, and what the consumer must say about it. */
struct hostile {
    char subject[300];
    char msg_id[300]; /* "" with no_msg_id: no Nats-Msg-Id header at all */
    int no_msg_id;
    char *body;          /* malloc'd */
    size_t pad_value;    /* one X-Pad header of this many bytes (0: none) */
    int pad_headers;     /* this many small X-Pad-<n> headers */
    const char *check;   /* the check the log must name */
    const char *reason;  /* a part of the reason the log must give */
    char env_ids[2][40]; /* ids it carries that must reach no handler and no ledger row */
    uint64_t seq;        /* its stream sequence, once published */
};

struct hostile_run {
    struct consume_group g;
    struct hostile h[MAX_HOSTILE];
    int count;
    int port; /* the consumer's OUTBOX_HTTP_ADDR port */
};

/* A fresh event id, as a writer would make it. */
static void
fresh_id(char out[40])
{
    char *id = harness_scalar_text(conn, "SELECT outbox.uuid_v7()::text");

    snprintf(out, 40, "%s", id);
    free(id);
}

/* A valid v1 envelope of a movie review with id `id`; malloc'd. */
static char *
envelope_json(const char *id)
{
    char buf[512];

    snprintf(buf, sizeof(buf),
             "{\"id\":\"%s\",\"event_type\":\"review.logged\",\"aggregate_type\":\"movie\","
             "\"aggregate_id\":\"0b0e3c3e-8c1e-4d6a-9a51-5c1f0b9d2a11\","
             "\"occurred_at\":\"2026-11-29T09:41:56.123Z\",\"schema_version\":1,"
             "\"payload\":{\"stars\":1}}",
             id);
    return strdup(buf);
}

/* The next hostile message of the run, on the envelope's own subject unless changed. */
static struct hostile *
add(struct hostile_run *r, const char *check, const char *reason)
{
    struct hostile *h = &r->h[r->count++];

    cr_assert_leq(r->count, MAX_HOSTILE);
    memset(h, 0, sizeof(*h));
    snprintf(h->subject, sizeof(h->subject), "%s.movie.review.logged", r->g.prefix);
    h->check = check;
    h->reason = reason;
    return h;
}

static void
publish(struct test_js_conn *c, struct hostile *h)
{
    natsMsg *msg = NULL;
    jsPubAck *ack = NULL;
    jsErrCode code = 0;
    natsStatus s;

    cr_assert_eq(natsMsg_Create(&msg, h->subject, NULL, h->body, (int)strlen(h->body)), NATS_OK);
    if (!h->no_msg_id) {
        cr_assert_eq(natsMsgHeader_Set(msg, "Nats-Msg-Id", h->msg_id), NATS_OK);
    }
    if (h->pad_value > 0) {
        char *pad = malloc(h->pad_value + 1);

        memset(pad, 'p', h->pad_value);
        pad[h->pad_value] = '\0';
        cr_assert_eq(natsMsgHeader_Set(msg, "X-Pad", pad), NATS_OK);
        free(pad);
    }
    for (int i = 0; i < h->pad_headers; i++) {
        char key[32];

        snprintf(key, sizeof(key), "X-Pad-%d", i);
        cr_assert_eq(natsMsgHeader_Set(msg, key, "0123456789"), NATS_OK);
    }
    s = js_PublishMsg(&ack, c->js, msg, NULL, &code);
    cr_assert_eq(s, NATS_OK, "publishing on %s: %s (jetstream error %d)", h->subject,
                 natsStatus_GetText(s), (int)code);
    cr_assert(!ack->Duplicate, "the server took the message on %s for a duplicate", h->subject);
    h->seq = ack->Sequence;
    jsPubAck_Destroy(ack);
    natsMsg_Destroy(msg);
}

/* `n` good events, committed and published by the group's relay. */
static void
good_events(int n)
{
    relay_test_enqueue(conn, n);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
}

/* The log line that refused message `h`, by its stream sequence; NULL if none. */
static char *
refusal_line(char *log, const struct hostile *h)
{
    char seq[48];

    snprintf(seq, sizeof(seq), " stream_seq=%llu ", (unsigned long long)h->seq);
    for (char *line = log, *end; *line != '\0'; line = end + 1) {
        end = strchr(line, '\n');
        if (end == NULL) {
            end = line + strlen(line) - 1;
        } else {
            *end = '\0';
        }
        if (strstr(line, "message refused, terminated") != NULL && strstr(line, seq) != NULL) {
            return line;
        }
    }
    return NULL;
}

static void
expect_refused_in_log(const struct harness_proc *consumer, const struct hostile *h)
{
    char *log = harness_proc_log(consumer);
    char *line = refusal_line(log, h);
    char check[48];

    cr_assert_not_null(line, "no refusal logged for the message at stream sequence %llu (%s)",
                       (unsigned long long)h->seq, h->check);
    cr_log_info("seq %llu: %s", (unsigned long long)h->seq, line);
    snprintf(check, sizeof(check), " check=%s ", h->check);
    cr_assert(strstr(line, check) != NULL, "the refusal does not name check %s: %s", h->check,
              line);
    cr_assert(strstr(line, h->reason) != NULL, "the refusal does not say \"%s\": %s", h->reason,
              line);
    free(log);
}

/* Every hostile message terminated, each once, and nothing else. */
static void
expect_terminated(struct consume_nats_terms *terms, const struct hostile_run *r)
{
    uint64_t seqs[MAX_HOSTILE + 4];
    int n = consume_nats_terms_take(terms, 3000, seqs, MAX_HOSTILE + 4);

    cr_assert_eq(n, r->count, "%d messages were terminated, not the %d hostile ones", n, r->count);
    for (int i = 0; i < r->count; i++) {
        int found = 0;

        for (int k = 0; k < n; k++) {
            found += seqs[k] == r->h[i].seq;
        }
        cr_assert_eq(found, 1, "the message at sequence %llu (%s) was terminated %d times",
                     (unsigned long long)r->h[i].seq, r->h[i].check, found);
    }
}

/* No handler ran for any id a hostile message carries, and the ledger never heard of it. */
static void
expect_no_trace_of(const struct hostile *h)
{
    for (int k = 0; k < 2; k++) {
        if (h->env_ids[k][0] == '\0') {
            continue;
        }
        cr_assert_eq(
            consume_test_ll(conn, "SELECT count(*) FROM public.effects WHERE event_id = $1::uuid",
                            h->env_ids[k]),
            0, "a handler ran for the %s message's id %s", h->check, h->env_ids[k]);
        cr_assert_eq(consume_test_ll(conn,
                                     "SELECT count(*) FROM outbox.processed_events WHERE "
                                     "event_id = $1::uuid",
                                     h->env_ids[k]),
                     0, "the ledger has a row for the %s message's id %s", h->check, h->env_ids[k]);
    }
}

static void
run_begin(struct hostile_run *r, const char *tag)
{
    memset(r, 0, sizeof(*r));
    consume_group_init(&r->g, "jetstream", tag, dir);
}

/*
 * Good events, the hostile messages, good events again; then one consumer
 * drains the stream, and the outcome is checked where operators look.
 */
static void
run_and_check(struct hostile_run *r)
{
    const char *const handlers[] = {CONSUME_EFFECT("audit"), NULL};
    struct consume_nats_terms terms = {0};
    struct consume_nats_state st;
    struct harness_proc consumer;
    struct test_js_conn c;
    char addr[64], err[512] = "";
    char *metrics = NULL;
    double refused;
    uint64_t last = 0;

    /* Long enough that nothing is redelivered unless it was left unsettled. */
    relay_env_set(&r->g.env, "OUTBOX_ACK_WAIT_SECONDS", "30");
    r->port = http_free_port();
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", r->port);
    relay_env_set(&r->g.env, "OUTBOX_HTTP_ADDR", addr);
    cr_assert_eq(consume_nats_terms_watch(&terms, harness_nats_url(), r->g.stream, r->g.consumer,
                                          err, sizeof(err)),
                 0, "%s", err);

    good_events(GOOD); /* the relay creates the stream with the first of them */
    cr_assert_eq(test_js_open(&c, harness_nats_url(), err, sizeof(err)), 0, "%s", err);
    for (int i = 0; i < r->count; i++) {
        publish(&c, &r->h[i]);
    }
    test_js_close(&c);
    good_events(GOOD);
    cr_assert_eq(consume_nats_last_seq(harness_nats_url(), r->g.stream, &last, err, sizeof(err)), 0,
                 "%s", err);
    cr_assert_eq(last, (uint64_t)(2 * GOOD + r->count), "the stream does not hold every message");

    consume_test_start(&consumer, &r->g.env, "hostile-1", handlers);
    HARNESS_WAIT_UNTIL(consume_test_nats_drained(r->g.stream, r->g.consumer), 30000);
    /* Settled means counted: the counter is added before the batch is settled. */
    cr_assert_eq(http_get(r->port, "/metrics", &metrics), 200, "GET /metrics");
    refused = http_metric(metrics, "outbox_consumer_refused_total");
    free(metrics);
    st = consume_test_nats_state(r->g.stream, r->g.consumer);
    consume_test_stop(&consumer, 10000);

    /* Every good event handled once, before and after; nothing for what was refused. */
    consume_test_expect_exactly_once(conn, "audit");
    consume_test_expect_nothing_spent(conn);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.processed_events p "
                                         "WHERE NOT EXISTS (SELECT 1 FROM public.committed c "
                                         "WHERE c.id = p.event_id)"),
                 0, "the ledger has rows for events never committed");
    for (int i = 0; i < r->count; i++) {
        expect_no_trace_of(&r->h[i]);
    }
    for (int i = 0; i < r->count; i++) {
        expect_refused_in_log(&consumer, &r->h[i]);
    }
    cr_assert_eq(refused, r->count, "outbox_consumer_refused_total is %g, not %d", refused,
                 r->count);
    /* Settled at the first delivery: terminated, never handed out again. */
    expect_terminated(&terms, r);
    consume_nats_terms_close(&terms);
    cr_assert_eq(st.delivered_consumer_seq, last,
                 "%llu deliveries for %llu messages: something was redelivered",
                 (unsigned long long)st.delivered_consumer_seq, (unsigned long long)last);
    cr_assert_eq(st.num_redelivered, 0);

    for (int i = 0; i < r->count; i++) {
        free(r->h[i].body);
    }
    consume_group_fini(&r->g);
}

Test(hostile_messages, a_message_without_an_envelope_is_refused_and_terminated)
{
    struct hostile_run r;
    struct hostile *h;
    char id[40];

    run_begin(&r, "NOENV");
    /* An empty body under a plausible id. */
    h = add(&r, "envelope", "the message has no body, so no envelope");
    fresh_id(h->msg_id);
    h->body = strdup("");
    /* Not JSON at all. */
    h = add(&r, "envelope", "envelope is not valid JSON");
    fresh_id(h->msg_id);
    h->body = strdup("GET / HTTP/1.1");
    /* JSON, but only an id: no envelope. */
    h = add(&r, "envelope", "envelope has no event_type");
    fresh_id(id);
    snprintf(h->msg_id, sizeof(h->msg_id), "%s", id);
    snprintf(h->env_ids[0], sizeof(h->env_ids[0]), "%s", id);
    h->body = malloc(128);
    snprintf(h->body, 128, "{\"id\":\"%s\"}", id);
    /* A JSON array. */
    h = add(&r, "envelope", "envelope must be a JSON object");
    fresh_id(h->msg_id);
    h->body = strdup("[1,2,3]");
    run_and_check(&r);
}

Test(hostile_messages, a_forged_nats_msg_id_is_refused_and_terminated)
{
    struct hostile_run r;
    struct hostile *h;

    run_begin(&r, "FORGED");
    /* Not an event id at all. */
    h = add(&r, "msg_id", "is not an event id");
    fresh_id(h->env_ids[0]);
    snprintf(h->msg_id, sizeof(h->msg_id), "forged-1");
    h->body = envelope_json(h->env_ids[0]);
    /* No Nats-Msg-Id: the broker cannot deduplicate it. */
    h = add(&r, "msg_id", "the message has no Nats-Msg-Id");
    fresh_id(h->env_ids[0]);
    h->no_msg_id = 1;
    h->body = envelope_json(h->env_ids[0]);
    /* The envelope's id spelled in capitals: another key in the duplicate window. */
    h = add(&r, "msg_id", "differs from the envelope's id");
    fresh_id(h->env_ids[0]);
    for (size_t i = 0; h->env_ids[0][i] != '\0'; i++) {
        h->msg_id[i] = (char)toupper((unsigned char)h->env_ids[0][i]);
    }
    h->body = envelope_json(h->env_ids[0]);
    /* A requeue's form, but not a requeue's number. */
    h = add(&r, "msg_id", "differs from the envelope's id");
    fresh_id(h->env_ids[0]);
    snprintf(h->msg_id, sizeof(h->msg_id), "%s:requeue:x", h->env_ids[0]);
    h->body = envelope_json(h->env_ids[0]);
    run_and_check(&r);
}

Test(hostile_messages, oversized_headers_are_refused_and_terminated)
{
    struct hostile_run r;
    struct hostile *h;

    run_begin(&r, "HEADERS");
    /* One long value; the envelope and its id are otherwise right. */
    h = add(&r, "headers", "more than the 4096 a relay sends");
    fresh_id(h->env_ids[0]);
    snprintf(h->msg_id, sizeof(h->msg_id), "%s", h->env_ids[0]);
    h->body = envelope_json(h->env_ids[0]);
    h->pad_value = 16 * 1024; /* JetStream itself refuses header blocks over 64 KiB */
    /* Many small headers. */
    h = add(&r, "headers", "more than the 4096 a relay sends");
    fresh_id(h->env_ids[0]);
    snprintf(h->msg_id, sizeof(h->msg_id), "%s", h->env_ids[0]);
    h->body = envelope_json(h->env_ids[0]);
    h->pad_headers = 500;
    run_and_check(&r);
}

Test(hostile_messages, a_subject_outside_the_convention_is_refused_and_terminated)
{
    struct hostile_run r;
    struct hostile *h;

    run_begin(&r, "SUBJECT");
    /* Too few tokens for {prefix}.{aggregate_type}.{event_type}. */
    h = add(&r, "subject", "is not the envelope's subject");
    fresh_id(h->env_ids[0]);
    snprintf(h->msg_id, sizeof(h->msg_id), "%s", h->env_ids[0]);
    snprintf(h->subject, sizeof(h->subject), "%s.movie", r.g.prefix);
    h->body = envelope_json(h->env_ids[0]);
    /* A well-formed subject, but another route than the envelope's: a handler bound to
     * account events would run a movie review. */
    h = add(&r, "subject", "is not the envelope's subject");
    fresh_id(h->env_ids[0]);
    snprintf(h->msg_id, sizeof(h->msg_id), "%s", h->env_ids[0]);
    snprintf(h->subject, sizeof(h->subject), "%s.account.deleted", r.g.prefix);
    h->body = envelope_json(h->env_ids[0]);
    /* A token no writer may use. */
    h = add(&r, "subject", "is not the envelope's subject");
    fresh_id(h->env_ids[0]);
    snprintf(h->msg_id, sizeof(h->msg_id), "%s", h->env_ids[0]);
    snprintf(h->subject, sizeof(h->subject), "%s.movie.review.logged$", r.g.prefix);
    h->body = envelope_json(h->env_ids[0]);
    run_and_check(&r);
}

Test(hostile_messages, an_envelope_whose_id_is_not_its_nats_msg_id_is_refused_and_terminated)
{
    struct hostile_run r;
    struct hostile *h;

    run_begin(&r, "IDDIFF");
    /* Another valid event id: published first, it would take that event's place in the
     * duplicate window; its envelope must not run under either id. */
    h = add(&r, "msg_id", "differs from the envelope's id");
    fresh_id(h->env_ids[0]);
    fresh_id(h->env_ids[1]);
    snprintf(h->msg_id, sizeof(h->msg_id), "%s", h->env_ids[1]);
    h->body = envelope_json(h->env_ids[0]);
    run_and_check(&r);
}
