/* SPDX-License-Identifier: MIT */
/*
 * feed_nats.c - the JetStream feed: a durable pull consumer shared by the
 * replicas. This part connects, sets up the stream and the consumer, and
 * owns the feed's lifetime; fetch and settle are in feed_msgs_nats.c, and
 * feed_open_nats.c puts the two together behind the feed's interface.
 *
 * The connection comes from nats_conn_nats.c (logs instead of printing,
 * reconnects forever, short pings, write deadline, requests that fail at
 * once while disconnected). After every reconnect the stream and the
 * consumer are checked again before the next fetch: a server that came
 * back with an empty store gets them recreated.
 */
#include "feed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nats/nats.h>

#include "bus/stream_nats.h"
#include "common/error.h"
#include "envelope/subject.h"
#include "feed_nats_int.h"
#include "support/log.h"
#include "support/nats_conn_nats.h"
#include "support/pause.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define CONNECT_TIMEOUT_MS 2000
#define WRITE_TIMEOUT_MS   5000
#define NANOS_PER_SECOND   INT64_C(1000000000)

/* Drops one reference and releases mu; frees with the last one. */
static void
shared_unref_unlock(struct obx_nats_feed_shared *s)
{
    int last = --s->refs == 0;

    pthread_mutex_unlock(&s->mu);
    if (last) {
        pthread_mutex_destroy(&s->mu);
        free(s->name);
        free(s->url_redacted);
        free(s);
    }
}

static int
is_closing(struct obx_nats_feed_shared *s)
{
    int closing;

    pthread_mutex_lock(&s->mu);
    closing = s->closing;
    pthread_mutex_unlock(&s->mu);
    return closing;
}

static void
on_disconnected(natsConnection *nc, void *closure)
{
    struct obx_nats_feed_shared *s = closure;

    (void)nc;
    obx_nats_log_state(is_closing(s) ? OUTBOX_LOG_INFO : OUTBOX_LOG_WARN, "nats disconnected", NULL,
                       s->name, s->url_redacted);
}

static void
on_reconnected(natsConnection *nc, void *closure)
{
    struct obx_nats_feed_shared *s = closure;

    obx_nats_log_state(OUTBOX_LOG_INFO, "nats reconnected", nc, s->name, s->url_redacted);
    pthread_mutex_lock(&s->mu);
    s->reconnects++;
    pthread_mutex_unlock(&s->mu);
}

/* The last callback nats.c makes for a connection: drops its reference. */
static void
on_closed(natsConnection *nc, void *closure)
{
    struct obx_nats_feed_shared *s = closure;

    (void)nc;
    obx_nats_log_state(is_closing(s) ? OUTBOX_LOG_INFO : OUTBOX_LOG_WARN,
                       is_closing(s) ? "nats connection closed"
                                     : "nats connection closed, will reopen",
                       NULL, s->name, s->url_redacted);
    pthread_mutex_lock(&s->mu);
    shared_unref_unlock(s);
}

/* Destroys the subscription, the context and the connection (in that order). */
static void
drop_connection(struct obx_nats_feed *f)
{
    /* A bound consumer is never deleted by this; on_closed drops its reference later. */
    obx_nats_teardown(f->nc, f->js, f->sub);
    f->js = NULL;
    f->sub = NULL;
    f->nc = NULL;
    f->ready = 0;
}

static outbox_status
connect_feed(struct obx_nats_feed *f, outbox_error *err)
{
    jsOptions jo;
    natsStatus ns;
    char doing[300];

    pthread_mutex_lock(&f->shared->mu);
    f->shared->refs++; /* the connection's callbacks; on_closed drops it */
    pthread_mutex_unlock(&f->shared->mu);
    ns = natsConnection_Connect(&f->nc, f->opts);
    if (ns != NATS_OK) {
        pthread_mutex_lock(&f->shared->mu);
        f->shared->refs--; /* a connection that never connected makes no callbacks */
        pthread_mutex_unlock(&f->shared->mu);
        f->nc = NULL;
        snprintf(doing, sizeof(doing), "connecting to nats at %s", f->shared->url_redacted);
        return obx_nats_fail_connect(err, ns, OUTBOX_EINVAL, doing, &f->shared->hints);
    }
    jsOptions_Init(&jo);
    jo.Wait = 5000;
    ns = natsConnection_JetStream(&f->js, f->nc, &jo);
    if (ns != NATS_OK) {
        drop_connection(f);
        return obx_nats_fail(err, ns, OUTBOX_ENOMEM, "creating the jetstream context");
    }
    obx_nats_log_state(OUTBOX_LOG_INFO, "nats connected", f->nc, f->shared->name,
                       f->shared->url_redacted);
    return OUTBOX_OK;
}

int
obx_nats_feed_connected(struct obx_nats_feed *f)
{
    return f->nc != NULL && natsConnection_Status(f->nc) == NATS_CONN_STATUS_CONNECTED;
}

/*
 * nats.c gives up on a connection in a few cases (the same auth error
 * twice, some -ERRs); the feed must reconnect forever, so it opens a new
 * one, at most once per reconnect wait, and only when no batch still
 * holds messages of the old subscription.
 */
static void
reopen_if_closed(struct obx_nats_feed *f)
{
    outbox_error e = {0};
    long long now = obx_monotonic_ms();

    if ((f->nc != NULL && !natsConnection_IsClosed(f->nc)) || f->live_batches > 0 ||
        now - f->last_reopen_ms < OBX_NATS_RECONNECT_WAIT_MS) {
        return;
    }
    f->last_reopen_ms = now;
    drop_connection(f);
    if (connect_feed(f, &e) != OUTBOX_OK) {
        obx_log(OUTBOX_LOG_WARN, "nats reopen failed url=%s reason=\"%s\"", f->shared->url_redacted,
                e.message);
    }
}

static outbox_status
ensure_stream(struct obx_nats_feed *f, outbox_error *err)
{
    struct obx_stream_options so;

    obx_stream_options_init(&so);
    so.name = f->stream;
    so.subjects_prefix = f->prefix;
    if (f->stream_max_age_seconds > 0) {
        so.max_age_seconds = f->stream_max_age_seconds;
    }
    if (f->stream_replicas > 0) {
        so.replicas = f->stream_replicas;
    }
    so.check_only = 1; /* the relay owns duplicate_window; we only create what is missing */
    return obx_stream_ensure_nats(f->nc, f->js, &so, err);
}

/* Binds to the durable consumer by name; it was created before, so this never creates one. */
static outbox_status
bind_subscription(struct obx_nats_feed *f, outbox_error *err)
{
    jsSubOptions so;
    jsErrCode code = 0;
    natsStatus ns;

    jsSubOptions_Init(&so);
    so.Stream = f->stream;
    so.Consumer = f->consumer;
    ns = js_PullSubscribe(&f->sub, f->js, NULL, f->consumer, NULL, &so, &code);
    if (ns != NATS_OK) {
        f->sub = NULL;
        return obx_nats_fail(err, ns, OUTBOX_EUNAVAILABLE, "binding to the consumer");
    }
    return OUTBOX_OK;
}

outbox_status
obx_nats_feed_ready(struct obx_nats_feed *f, outbox_error *err)
{
    unsigned reconnects;
    outbox_status st;

    reopen_if_closed(f);
    if (!obx_nats_feed_connected(f)) {
        return obx_fail(err, OUTBOX_EUNAVAILABLE, "nats is not connected");
    }
    pthread_mutex_lock(&f->shared->mu);
    reconnects = f->shared->reconnects;
    pthread_mutex_unlock(&f->shared->mu);
    if (f->ready && reconnects == f->seen_reconnects) {
        return OUTBOX_OK;
    }
    st = ensure_stream(f, err);
    if (st == OUTBOX_OK) {
        st = obx_consumer_ensure(f->nc, &f->spec, err);
    }
    if (st == OUTBOX_OK && f->sub == NULL) {
        st = bind_subscription(f, err);
    }
    if (st == OUTBOX_OK) {
        f->ready = 1;
        f->seen_reconnects = reconnects;
        f->checked_ms = obx_monotonic_ms();
    }
    return st;
}

void
obx_nats_feed_close(struct obx_feed *feed)
{
    struct obx_nats_feed *f;

    if (feed == NULL) {
        return;
    }
    f = feed->impl;
    if (f != NULL) {
        if (f->shared != NULL) {
            pthread_mutex_lock(&f->shared->mu);
            f->shared->closing = 1;
            pthread_mutex_unlock(&f->shared->mu);
        }
        drop_connection(f);
        natsOptions_Destroy(f->opts);
        free(f->stream);
        free(f->prefix);
        free(f->consumer);
        free(f->filter);
        if (f->shared != NULL) {
            pthread_mutex_lock(&f->shared->mu);
            shared_unref_unlock(f->shared);
        }
        free(f);
    }
    free(feed);
}

static outbox_status
check_options(const struct obx_feed_options *o, outbox_error *err)
{
    if (o->stream == NULL || !obx_token_valid(o->stream, strlen(o->stream))) {
        return obx_fail(err, OUTBOX_EINVAL, "stream name must be one token of [A-Za-z0-9_-]");
    }
    if (o->consumer_name == NULL || !obx_token_valid(o->consumer_name, strlen(o->consumer_name))) {
        return obx_fail(err, OUTBOX_EINVAL, "consumer name must be one token of [A-Za-z0-9_-]");
    }
    if (o->ack_wait_seconds < 1 || o->ack_wait_seconds > 86400) {
        return obx_fail(err, OUTBOX_EINVAL, "ack_wait_seconds %d is outside 1 to 86400",
                        o->ack_wait_seconds);
    }
    if (o->max_deliver != -1 && o->max_deliver < 1) {
        return obx_fail(err, OUTBOX_EINVAL, "max_deliver %lld must be -1 or positive",
                        o->max_deliver);
    }
    if (o->max_ack_pending != -1 && o->max_ack_pending < 1) {
        return obx_fail(err, OUTBOX_EINVAL, "max_ack_pending %d must be -1 or positive",
                        o->max_ack_pending);
    }
    return obx_subject_prefix_check(o->subject_prefix, err);
}

static outbox_status
shared_new(const struct obx_feed_options *o, struct obx_nats_feed_shared **out, outbox_error *err)
{
    struct obx_nats_feed_shared *s = calloc(1, sizeof(*s));
    char redacted[512];

    if (s == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory for the feed");
    }
    pthread_mutex_init(&s->mu, NULL);
    s->refs = 1;
    obx_nats_redact(o->nats_url != NULL ? o->nats_url : "", redacted, sizeof(redacted));
    s->name = strdup(o->name != NULL ? o->name : "");
    s->url_redacted = strdup(redacted);
    obx_nats_hints_init(&s->hints, &o->auth, o->nats_url != NULL ? o->nats_url : "");
    *out = s;
    return s->name != NULL && s->url_redacted != NULL
               ? OUTBOX_OK
               : obx_fail(err, OUTBOX_ENOMEM, "out of memory for the feed");
}

/* Everything but the connection. */
static outbox_status
feed_new(const struct obx_feed_options *o, struct obx_nats_feed *f, outbox_error *err)
{
    struct obx_nats_settings ns = {
        .url = o->nats_url,
        .name = o->name,
        .auth = o->auth,
        .connect_timeout_ms = CONNECT_TIMEOUT_MS,
        .write_timeout_ms = WRITE_TIMEOUT_MS,
    };
    char filter[OBX_SUBJECT_CAP];
    outbox_status st = shared_new(o, &f->shared, err);

    snprintf(filter, sizeof(filter), "%s.>", o->subject_prefix);
    f->stream = strdup(o->stream);
    f->prefix = strdup(o->subject_prefix);
    f->consumer = strdup(o->consumer_name);
    f->filter = strdup(filter);
    f->stream_max_age_seconds = o->stream_max_age_seconds;
    f->stream_replicas = o->stream_replicas;
    if (st == OUTBOX_OK && (!f->stream || !f->prefix || !f->consumer || !f->filter)) {
        st = obx_fail(err, OUTBOX_ENOMEM, "out of memory for the feed");
    }
    f->spec = (struct obx_consumer_spec){
        .stream = f->stream,
        .consumer = f->consumer,
        .filter = f->filter,
        .ack_wait_ns = (int64_t)o->ack_wait_seconds * NANOS_PER_SECOND,
        .max_deliver = o->max_deliver,
        .max_ack_pending = o->max_ack_pending,
    };
    if (st == OUTBOX_OK) {
        st = obx_nats_options_new(&ns, &f->opts, err);
    }
    if (st == OUTBOX_OK) {
        natsOptions_SetDisconnectedCB(f->opts, on_disconnected, f->shared);
        natsOptions_SetReconnectedCB(f->opts, on_reconnected, f->shared);
        natsOptions_SetClosedCB(f->opts, on_closed, f->shared);
    }
    return st;
}

outbox_status
obx_nats_feed_connect(struct obx_nats_feed *f, const struct obx_feed_options *opts,
                      outbox_error *err)
{
    outbox_status st = check_options(opts, err);

    if (st == OUTBOX_OK) {
        st = feed_new(opts, f, err);
    }
    if (st == OUTBOX_OK) {
        st = connect_feed(f, err);
    }
    if (st == OUTBOX_OK) {
        st = obx_nats_feed_ready(f, err);
    }
    return st;
}
