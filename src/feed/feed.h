/* SPDX-License-Identifier: MIT */
/*
 * feed.h - where consumers get events from: a durable JetStream pull
 * consumer shared by the replicas (feed_nats.c), or the outbox table
 * itself, leased like the relay leases it (feed_db.c, OUTBOX_BUS=db).
 *
 * The consumer loop sees only this interface: fetch a batch, run the
 * handlers, then settle every message of the batch at once. Settling is
 * per message (ack, nak with a delay, terminate) but may be carried out
 * in one round trip (the DB feed finishes all its rows in one statement).
 *
 * A feed belongs to one thread (the consumer loop).
 */
#ifndef OBX_FEED_H
#define OBX_FEED_H

#include <stddef.h>

#include "outbox/outbox.h"
#include "support/nats_auth.h"

/* One delivered event. Strings are borrowed until the batch is finished. */
struct obx_feed_msg {
    const char *event_id; /* Nats-Msg-Id, or the outbox row id; "" if the message has none */
    const char *subject;  /* {prefix}.{aggregate_type}.{event_type} */
    const char *envelope; /* the envelope JSON (JetStream: the body as sent, maybe not JSON) */
    size_t envelope_len;
    long long deliveries; /* how many times the feed delivered it (1 = first); DB feed:
                           * 1 + leases of the row that ran out (NAKs do not count) */
    size_t header_bytes;  /* JetStream: the headers as sent ("Key: value\r\n" each); DB: 0 */
    unsigned long long stream_seq; /* JetStream: its stream sequence, for operators; DB: 0 */
};

struct obx_feed_batch {
    size_t count;
    struct obx_feed_msg *msgs; /* owned by the feed; `count` entries */
    void *impl;                /* the feed's own per-batch state */
};

enum obx_settle {
    OBX_SETTLE_ACK,  /* every handler is done with it (or skipped it) */
    OBX_SETTLE_NAK,  /* deliver again after `delay_ms`; spends nothing */
    OBX_SETTLE_TERM, /* dead-lettered: never deliver again */
};

struct obx_feed;

struct obx_feed_ops {
    /*
     * Waits up to `timeout_ms` for up to `max` messages. An empty batch is
     * not an error. OUTBOX_EUNAVAILABLE while the server is away; both feeds
     * reconnect by themselves on a later call, so the feed can be kept.
     */
    outbox_status (*fetch)(struct obx_feed *feed, size_t max, int timeout_ms,
                           struct obx_feed_batch *out, outbox_error *err);

    /* Tells the server message `i` is still being worked on (long handlers). */
    outbox_status (*in_progress)(struct obx_feed *feed, struct obx_feed_batch *batch, size_t i,
                                 outbox_error *err);

    /*
     * Settles every message: what[i], and delay_ms[i] for NAK. A failure
     * leaves the messages to the server's redelivery (ack_wait or the
     * lease), which the ledger makes harmless.
     */
    outbox_status (*settle)(struct obx_feed *feed, struct obx_feed_batch *batch,
                            const enum obx_settle *what, const long long *delay_ms,
                            outbox_error *err);

    /*
     * 1 while the connection to the server stands, even if the server
     * cannot serve right now (a JetStream cluster electing a leader).
     * NULL for a feed that cannot tell.
     */
    int (*connected)(struct obx_feed *feed);

    /* Frees the batch (after settle, or instead of it on shutdown). */
    void (*batch_fini)(struct obx_feed *feed, struct obx_feed_batch *batch);

    /* Closes the feed; safe on a half-open one. Finish every batch first
     * (batch_fini): its messages still use the feed's connection. */
    void (*close)(struct obx_feed *feed);
};

struct obx_feed {
    const struct obx_feed_ops *ops;
    void *impl; /* owned by the backend, freed by ops->close */
    /* How long a fetched message stays this consumer's unsettled before the server
     * hands it out again (JetStream's ack_wait, a lease): in_progress starts it anew. */
    int held_seconds;
};

/*
 * Allocates a feed with `ops` and a zeroed backend state of `impl_size`
 * bytes in feed->impl (freed by ops->close). NULL when out of memory.
 */
struct obx_feed *obx_feed_alloc(const struct obx_feed_ops *ops, size_t impl_size);

/* What both feeds need to know. */
struct obx_feed_options {
    const char *database_url;         /* DB feed */
    const char *schema;               /* DB feed */
    int lease_seconds;                /* DB feed: OUTBOX_LEASE_SECONDS */
    int prune;                        /* DB feed: 1 deletes acked rows, 0 marks them done */
    const char *nats_url;             /* JetStream feed */
    const char *stream;               /* JetStream: "EVENTS" */
    const char *subject_prefix;       /* the consumer filters {prefix}.> */
    const char *consumer_name;        /* JetStream durable consumer, shared by replicas */
    int ack_wait_seconds;             /* JetStream consumer ack_wait */
    long long max_deliver;            /* JetStream safety net; -1: unlimited */
    int max_ack_pending;              /* JetStream; sized for batch x replicas; -1: unlimited */
    const char *name;                 /* replica name for logs */
    struct obx_nats_auth auth;        /* JetStream: credentials and TLS */
    long long stream_max_age_seconds; /* JetStream: max_age if the feed creates the stream;
                                       * <= 0: the relay's default, 7 days */
    int stream_replicas;              /* JetStream: num_replicas if the feed creates the stream;
                                       * <= 0: 1 */
};

/*
 * Opens the JetStream feed: connects, creates the stream if missing (the
 * relay's settings; an existing stream is only checked, never updated),
 * creates or updates the durable consumer (only ack_wait and max_deliver
 * are changed in place; if the server refuses, the `nats consumer edit`
 * command is logged and the feed runs anyway; a lower max_ack_pending is
 * only logged). OUTBOX_EUNAVAILABLE while NATS is down, OUTBOX_EINVAL for
 * bad options or a push consumer of that name. Once open, the feed
 * reconnects by itself and checks stream and consumer again after every
 * reconnect; nothing is sent while disconnected (OUTBOX_EUNAVAILABLE).
 */
outbox_status obx_feed_nats_open(const struct obx_feed_options *opts, struct obx_feed **out,
                                 outbox_error *err);

/*
 * Opens the DB feed: leases outbox rows like the relay (ACK finishes the
 * row as done, NAK releases it with the delay, TERM finishes it too: its
 * dead letter is in dead_letters). in_progress extends the row's lease.
 * A row the relay would quarantine (bad envelope, unroutable subject) is
 * never delivered: it is set invalid with the reason by the finish of the
 * batch it was leased with. OUTBOX_EUNAVAILABLE while the database is
 * down; the feed reconnects on the next call.
 */
outbox_status obx_feed_db_open(const struct obx_feed_options *opts, struct obx_feed **out,
                               outbox_error *err);

#endif
