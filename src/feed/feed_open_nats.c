/* SPDX-License-Identifier: MIT */
/*
 * feed_open_nats.c - the JetStream feed behind the feed interface: its
 * operations (fetch and settle from feed_msgs_nats.c, close from
 * feed_nats.c) and the one way to open it. The top of the JetStream feed:
 * the files below it never call up here.
 */
#include "feed.h"

#include "common/error.h"
#include "feed_nats_int.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static int
nats_connected(struct obx_feed *feed)
{
    return obx_nats_feed_connected(feed->impl);
}

static const struct obx_feed_ops nats_ops = {
    .fetch = obx_nats_feed_fetch,
    .in_progress = obx_nats_feed_in_progress,
    .settle = obx_nats_feed_settle,
    .connected = nats_connected,
    .batch_fini = obx_nats_feed_batch_fini,
    .close = obx_nats_feed_close,
};

outbox_status
obx_feed_nats_open(const struct obx_feed_options *opts, struct obx_feed **out, outbox_error *err)
{
    struct obx_feed *feed;
    outbox_status st;

    obx_error_reset(err);
    feed = obx_feed_alloc(&nats_ops, sizeof(struct obx_nats_feed));
    if (feed == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory for the feed");
    }
    feed->held_seconds = opts->ack_wait_seconds;
    st = obx_nats_feed_connect(feed->impl, opts, err);
    if (st != OUTBOX_OK) {
        obx_nats_feed_close(feed);
        return st;
    }
    *out = feed;
    return OUTBOX_OK;
}
