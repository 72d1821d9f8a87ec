/* SPDX-License-Identifier: MIT */
/*
 * raw_publish_nats.c - JetStream async publish at full speed, for the
 * benchmark's raw_publish case: nats.c's own window (MaxPending) and ack
 * handler, one unique Nats-Msg-Id per message, nothing else.
 */
#include "raw_publish.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nats/nats.h>

#include "common/error.h"
#include "envelope/subject.h"
#include "support/nats_conn_nats.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define COMPLETE_TIMEOUT_MS 60000

/* Filled by on_ack() on nats.c's thread. */
struct tally {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    size_t acked;
    size_t failed;
    char first_failure[160];
};

static void
on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
    struct tally *t = closure;

    (void)js;
    pthread_mutex_lock(&t->mu);
    if (pa != NULL) {
        t->acked++;
    } else {
        if (t->failed++ == 0) {
            snprintf(t->first_failure, sizeof(t->first_failure), "%s (err_code=%d)",
                     pae != NULL && pae->ErrText != NULL ? pae->ErrText : "no ack",
                     pae != NULL ? (int)pae->ErrCode : 0);
        }
    }
    natsMsg_Destroy(msg);
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->mu); /* last touch of *t: see settle() */
}

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static outbox_status
connect_raw(const char *url, int window, struct tally *t, natsConnection **nc, jsCtx **js,
            outbox_error *err)
{
    struct obx_nats_settings s = {.url = url,
                                  .name = "outbox-bench-raw",
                                  .auth = *obx_nats_tool_auth(),
                                  .connect_timeout_ms = 5000,
                                  .write_timeout_ms = 10000};
    natsOptions *opts = NULL;
    jsOptions jo;
    natsStatus ns;
    outbox_status st = obx_nats_options_new(&s, &opts, err);

    if (st != OUTBOX_OK) {
        return st;
    }
    ns = natsConnection_Connect(nc, opts);
    natsOptions_Destroy(opts);
    if (ns != NATS_OK) {
        return obx_nats_fail(err, ns, OUTBOX_EINVAL, "connecting to nats");
    }
    jsOptions_Init(&jo);
    jo.PublishAsync.MaxPending = window;
    jo.PublishAsync.StallWait = COMPLETE_TIMEOUT_MS;
    jo.PublishAsync.AckHandler = on_ack;
    jo.PublishAsync.AckHandlerClosure = t;
    ns = natsConnection_JetStream(js, *nc, &jo);
    return ns == NATS_OK ? OUTBOX_OK
                         : obx_nats_fail(err, ns, OUTBOX_ENOMEM, "creating the jetstream context");
}

/*
 * Publishes everything and waits for the last ack; NATS_OK only if all were
 * sent and answered. *published counts the messages nats.c took.
 */
static natsStatus
publish_all(jsCtx *js, const char *stream, const char *subject, const char *body, size_t body_bytes,
            size_t count, size_t *published)
{
    char id[96];
    jsPubOptions po;
    natsStatus ns = NATS_OK;
    long run = (long)time(NULL);

    jsPubOptions_Init(&po);
    po.ExpectStream = stream;
    po.MsgId = id;
    for (size_t i = 0; i < count && ns == NATS_OK; i++) {
        snprintf(id, sizeof(id), "raw-%ld-%ld-%zu", (long)getpid(), run, i);
        ns = js_PublishAsync(js, subject, body, (int)body_bytes, &po);
        *published += ns == NATS_OK;
    }
    if (ns == NATS_OK) {
        jsPubOptions_Init(&po);
        po.MaxWait = COMPLETE_TIMEOUT_MS;
        ns = js_PublishAsyncComplete(js, &po);
    }
    return ns;
}

/*
 * After a failure: takes back what nats.c still holds and waits until
 * on_ack() has returned for every other message, so `t` can go away.
 */
static void
settle(jsCtx *js, struct tally *t, size_t published)
{
    natsMsgList pending = {NULL, 0};
    size_t expected = published;

    if (published > 0 && js_PublishAsyncGetPendingList(&pending, js) == NATS_OK) {
        expected -= (size_t)pending.Count;
        natsMsgList_Destroy(&pending);
    }
    pthread_mutex_lock(&t->mu);
    while (t->acked + t->failed < expected) {
        pthread_cond_wait(&t->cond, &t->mu);
    }
    pthread_mutex_unlock(&t->mu);
}

static outbox_status
check_args(const char *url, const char *stream, const char *subject_prefix, size_t count,
           int window, outbox_error *err)
{
    if (url == NULL || stream == NULL || !obx_token_valid(stream, strlen(stream))) {
        return obx_fail(err, OUTBOX_EINVAL, "raw publish needs a url and a stream name");
    }
    if (obx_subject_prefix_check(subject_prefix, err) != OUTBOX_OK) {
        return OUTBOX_EINVAL;
    }
    if (count == 0 || window <= 0) {
        return obx_fail(err, OUTBOX_EINVAL, "raw publish count and window must be positive");
    }
    return OUTBOX_OK;
}

outbox_status
obx_raw_publish_rate(const char *url, const char *stream, const char *subject_prefix, size_t count,
                     size_t body_bytes, int window, double *events_per_s, outbox_error *err)
{
    struct tally t = {.mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    size_t published = 0;
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    char subject[OBX_SUBJECT_CAP];
    char *body = NULL;
    double start, elapsed;
    natsStatus ns;
    outbox_status st = check_args(url, stream, subject_prefix, count, window, err);

    if (st == OUTBOX_OK && (body = malloc(body_bytes + 1)) == NULL) {
        st = obx_fail(err, OUTBOX_ENOMEM, "out of memory for a %zu byte body", body_bytes);
    }
    if (st == OUTBOX_OK) {
        st = connect_raw(url, window, &t, &nc, &js, err);
    }
    if (st != OUTBOX_OK) {
        goto done;
    }
    memset(body, 'x', body_bytes);
    snprintf(subject, sizeof(subject), "%s.bench.raw", subject_prefix);
    start = now_s();
    ns = publish_all(js, stream, subject, body, body_bytes, count, &published);
    elapsed = now_s() - start;
    if (ns != NATS_OK) {
        settle(js, &t, published);
    }
    pthread_mutex_lock(&t.mu);
    if (ns != NATS_OK) {
        st = obx_nats_fail(err, ns, OUTBOX_EUNAVAILABLE, "raw publish");
    } else if (t.failed > 0 || t.acked != count) {
        st = obx_fail(err, OUTBOX_EUNAVAILABLE, "raw publish: %zu of %zu not acked: %s",
                      count - t.acked, count, t.first_failure);
    } else {
        *events_per_s = (double)count / (elapsed > 0 ? elapsed : 1e-9);
    }
    pthread_mutex_unlock(&t.mu);
done:
    obx_nats_teardown(nc, js, NULL);
    free(body);
    pthread_cond_destroy(&t.cond);
    pthread_mutex_destroy(&t.mu);
    return st;
}
