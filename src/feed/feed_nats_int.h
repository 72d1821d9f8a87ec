/* SPDX-License-Identifier: MIT */
/*
 * feed_nats_int.h - what the parts of the JetStream feed share, from the
 * bottom up: feed_consumer_nats.c (the durable consumer's settings),
 * feed_nats.c (connection, setup, lifetime), feed_msgs_nats.c (fetch and
 * settle) and feed_open_nats.c (the feed interface over them). Each calls
 * only the ones before it. Nothing else includes it but the fuzz target of
 * a received message.
 */
#ifndef OBX_FEED_NATS_INT_H
#define OBX_FEED_NATS_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <nats/nats.h>

#include "feed.h"
#include "support/nats_auth_nats.h"

/*
 * nats-server 2.9 drops a pull request for a consumer that no longer
 * exists without an answer: the fetch just times out. So while fetches
 * come back empty, the consumer's existence is checked this often.
 */
#define OBX_FEED_RECHECK_MS 10000

/* The durable consumer the feed needs. Strings owned by the feed. */
struct obx_consumer_spec {
    const char *stream;
    const char *consumer;
    const char *filter; /* "{prefix}.>" */
    int64_t ack_wait_ns;
    long long max_deliver;     /* -1: unlimited */
    long long max_ack_pending; /* -1: unlimited */
};

/*
 * What nats.c's callback threads may touch, under mu. Reference counted:
 * one reference for the feed, one per connection (dropped by its closed
 * callback, which nats.c may run after the feed is gone).
 */
struct obx_nats_feed_shared {
    pthread_mutex_t mu;
    int refs;
    int closing;
    unsigned reconnects; /* bumped by every reconnect: the setup is checked again */
    char *name;          /* for logs */
    char *url_redacted;
    struct obx_nats_hints hints; /* what to check when NATS refuses TLS or credentials */
};

struct obx_nats_feed {
    struct obx_nats_feed_shared *shared;
    natsOptions *opts;
    natsConnection *nc;
    jsCtx *js;
    natsSubscription *sub;
    struct obx_consumer_spec spec;
    char *stream, *prefix, *consumer, *filter; /* owned; spec points at them */
    long long stream_max_age_seconds;
    int stream_replicas;
    int ready;                /* stream and consumer checked since the last (re)connect */
    long long checked_ms;     /* when the consumer was last seen (monotonic) */
    unsigned seen_reconnects; /* shared->reconnects when last checked */
    size_t live_batches;      /* batches whose messages still need `sub` */
    long long last_reopen_ms;
};

/* feed_nats.c */

/* Connected right now (not reconnecting, not closed). */
int obx_nats_feed_connected(struct obx_nats_feed *f);

/*
 * Makes the feed usable: replaces a connection nats.c closed for good,
 * then (once per connect) checks the stream and the consumer and binds
 * the pull subscription. OUTBOX_EUNAVAILABLE while NATS is away.
 */
outbox_status obx_nats_feed_ready(struct obx_nats_feed *f, outbox_error *err);

/*
 * Checks `opts`, fills `f` (zeroed) from them, connects and sets up the
 * stream and the consumer. On failure `f` holds what was made so far:
 * obx_nats_feed_close() frees it.
 */
outbox_status obx_nats_feed_connect(struct obx_nats_feed *f, const struct obx_feed_options *opts,
                                    outbox_error *err);

/* The feed's close operation: safe on a half-open feed. */
void obx_nats_feed_close(struct obx_feed *feed);

/* feed_msgs_nats.c */

/*
 * A received message as the feed hands it on (views borrowed from `msg`):
 * its headers and body are whatever its publisher sent, so the fuzz target
 * tests/fuzz/fuzz_message.c drives this with arbitrary ones.
 */
void obx_nats_feed_describe(natsMsg *msg, struct obx_feed_msg *m);

outbox_status obx_nats_feed_fetch(struct obx_feed *feed, size_t max, int timeout_ms,
                                  struct obx_feed_batch *out, outbox_error *err);
outbox_status obx_nats_feed_in_progress(struct obx_feed *feed, struct obx_feed_batch *batch,
                                        size_t i, outbox_error *err);
outbox_status obx_nats_feed_settle(struct obx_feed *feed, struct obx_feed_batch *batch,
                                   const enum obx_settle *what, const long long *delay_ms,
                                   outbox_error *err);
void obx_nats_feed_batch_fini(struct obx_feed *feed, struct obx_feed_batch *batch);

/* feed_consumer_nats.c */

/*
 * Creates the durable pull consumer, or checks an existing one: ack_wait
 * and max_deliver are updated in place with every other field kept; what
 * cannot be updated is logged with the `nats consumer edit` command.
 * OUTBOX_EINVAL when the consumer can never serve us (a push consumer).
 */
outbox_status obx_consumer_ensure(natsConnection *nc, const struct obx_consumer_spec *spec,
                                  outbox_error *err);

/* Sets *exists to whether the consumer (and its stream) exist; changes and logs nothing. */
outbox_status obx_consumer_exists(natsConnection *nc, const struct obx_consumer_spec *spec,
                                  int *exists, outbox_error *err);

#endif
