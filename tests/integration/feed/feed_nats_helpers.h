/* SPDX-License-Identifier: MIT */
/*
 * feed_nats_helpers.h - what the JetStream feed tests share: a captured
 * log, the test's own nats.c connection, feed options on a fresh stream,
 * publishing, fetching and settling. Header-only (static inline) so each
 * test binary stays one file.
 */
#ifndef OBX_TEST_FEED_NATS_HELPERS_H
#define OBX_TEST_FEED_NATS_HELPERS_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <nats/nats.h>

#include "feed/feed.h"
#include "harness.h"
#include "outbox/worker.h"

#define NS_PER_S  INT64_C(1000000000)
#define MAX_BATCH 64

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_text[32768];
static size_t log_len;

static inline void
capture(void *ctx, outbox_log_level level, const char *line)
{
    (void)ctx;
    pthread_mutex_lock(&log_mu);
    log_len += (size_t)snprintf(log_text + log_len, sizeof(log_text) - log_len, "%d %s\n",
                                (int)level, line);
    if (log_len >= sizeof(log_text)) {
        log_len = sizeof(log_text) - 1;
    }
    pthread_mutex_unlock(&log_mu);
}

static inline int
logged(const char *needle)
{
    int found;

    pthread_mutex_lock(&log_mu);
    found = strstr(log_text, needle) != NULL;
    pthread_mutex_unlock(&log_mu);
    return found;
}

static natsConnection *nc;
static jsCtx *js;

static inline void
setup(void)
{
    outbox_set_logger(capture, NULL, OUTBOX_LOG_DEBUG);
    cr_assert_eq(natsConnection_ConnectTo(&nc, harness_nats_url()), NATS_OK);
    cr_assert_eq(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
}

static inline void
teardown(void)
{
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

/* ---- helpers ---------------------------------------------------------------------------- */

/* Options for consumer `name` on stream `stream` ({prefix}.>), after deleting that stream. */
static inline struct obx_feed_options
options(const char *stream, const char *prefix, const char *name, int ack_wait_seconds)
{
    struct obx_feed_options o;

    js_DeleteStream(js, stream, NULL, NULL); /* a server from outside may keep old ones */
    memset(&o, 0, sizeof(o));
    o.nats_url = harness_nats_url();
    o.stream = stream;
    o.subject_prefix = prefix;
    o.consumer_name = name;
    o.ack_wait_seconds = ack_wait_seconds;
    o.max_deliver = -1;
    o.max_ack_pending = 1000;
    o.name = "feed-test";
    return o;
}

static inline struct obx_feed *
open_feed(const struct obx_feed_options *o)
{
    struct obx_feed *feed = NULL;
    outbox_error err = {0};
    outbox_status st = obx_feed_nats_open(o, &feed, &err);

    cr_assert_eq(st, OUTBOX_OK, "obx_feed_nats_open: %s: %s", outbox_status_name(st), err.message);
    return feed;
}

/* Publishes `body` on `subject`; `id` goes into header `id_key` unless NULL. */
static inline void
publish_with(const char *subject, const char *id_key, const char *id, const char *body)
{
    natsMsg *msg = NULL;
    jsErrCode code = 0;

    cr_assert_eq(natsMsg_Create(&msg, subject, NULL, body, (int)strlen(body)), NATS_OK);
    if (id != NULL) {
        cr_assert_eq(natsMsgHeader_Set(msg, id_key, id), NATS_OK);
    }
    cr_assert_eq(js_PublishMsg(NULL, js, msg, NULL, &code), NATS_OK, "publish %s: %d", subject,
                 (int)code);
    natsMsg_Destroy(msg);
}

static inline void
publish(const char *subject, const char *id)
{
    char body[128];

    snprintf(body, sizeof(body), "{\"id\":\"%s\"}", id);
    publish_with(subject, "Nats-Msg-Id", id, body);
}

static inline outbox_status
fetch(struct obx_feed *feed, size_t max, int timeout_ms, struct obx_feed_batch *b)
{
    outbox_error err = {0};

    return feed->ops->fetch(feed, max, timeout_ms, b, &err);
}

/* Fetches until a batch with messages comes, or fails the test after timeout_ms. */
static inline void
fetch_some(struct obx_feed *feed, size_t max, int timeout_ms, struct obx_feed_batch *b)
{
    long long deadline = harness_now_ms() + timeout_ms;

    for (;;) {
        outbox_error err = {0};
        outbox_status st = feed->ops->fetch(feed, max, 200, b, &err);

        cr_assert(st == OUTBOX_OK || st == OUTBOX_EUNAVAILABLE, "fetch: %s: %s",
                  outbox_status_name(st), err.message);
        if (st == OUTBOX_OK && b->count > 0) {
            return;
        }
        feed->ops->batch_fini(feed, b);
        cr_assert(harness_now_ms() < deadline, "no message within %d ms", timeout_ms);
    }
}

static inline void
settle_all(struct obx_feed *feed, struct obx_feed_batch *b, enum obx_settle what, long long delay)
{
    enum obx_settle whats[MAX_BATCH];
    long long delays[MAX_BATCH];
    outbox_error err = {0};
    outbox_status st;

    cr_assert(b->count <= MAX_BATCH);
    for (size_t i = 0; i < b->count; i++) {
        whats[i] = what;
        delays[i] = delay;
    }
    st = feed->ops->settle(feed, b, whats, delays, &err);
    cr_assert_eq(st, OUTBOX_OK, "settle: %s: %s", outbox_status_name(st), err.message);
}

/* Fetches for `ms` and fails the test if any message comes. */
static inline void
expect_nothing_for(struct obx_feed *feed, int ms)
{
    long long deadline = harness_now_ms() + ms;

    while (harness_now_ms() < deadline) {
        struct obx_feed_batch b;

        cr_assert_eq(fetch(feed, MAX_BATCH, 200, &b), OUTBOX_OK);
        cr_assert_eq(b.count, 0, "unexpected message %s (deliveries %lld)",
                     b.count ? b.msgs[0].event_id : "", b.count ? b.msgs[0].deliveries : 0);
        feed->ops->batch_fini(feed, &b);
    }
}

static inline jsConsumerInfo *
consumer_info(const char *stream, const char *name)
{
    jsConsumerInfo *ci = NULL;
    jsErrCode code = 0;

    cr_assert_eq(js_GetConsumerInfo(&ci, js, stream, name, NULL, &code), NATS_OK, "consumer %s: %d",
                 name, (int)code);
    return ci;
}

#endif
