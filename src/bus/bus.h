/* SPDX-License-Identifier: MIT */
/*
 * bus.h - where the relay sends envelopes: JetStream (acked, deduplicated
 * by Nats-Msg-Id) or core NATS (fire-and-forget).
 *
 * The relay sees only this interface; nats.c types never leave *_nats.c.
 * One batch is in flight at a time: obx_bus_send() queues it without
 * waiting for acks, so the relay can lease the next batch meanwhile, then
 * obx_bus_collect() waits for the outcome of every message.
 *
 * An object belongs to one thread (the relay loop); nats.c's own threads
 * only hand acks over under a mutex inside bus_nats.c.
 */
#ifndef OBX_BUS_H
#define OBX_BUS_H

#include <stddef.h>

#include "outbox/outbox.h"
#include "support/nats_auth.h"

enum obx_bus_kind {
    OBX_BUS_JETSTREAM, /* positive ack from the expected stream, dedup by Nats-Msg-Id */
    OBX_BUS_NATS_CORE, /* fire-and-forget; done once flushed to the server */
};

struct obx_bus_options {
    enum obx_bus_kind kind;
    const char *url;           /* comma-separated server URLs */
    const char *stream;        /* JetStream stream name, e.g. "EVENTS" (ExpectStream) */
    struct obx_nats_auth auth; /* credentials and TLS */
    const char *ce_source;     /* CloudEvents source attribute */
    const char *name;          /* connection name shown by the server */
    int connect_timeout_ms;    /* per attempt */
    int publish_timeout_ms;    /* how long collect() waits for acks */
    int max_in_flight;         /* async publish window (messages) */
};

void obx_bus_options_init(struct obx_bus_options *opts);

struct obx_config;

/* The options the configuration gives (bus kind, URLs, credentials, TLS, window); `name` borrowed.
 */
void obx_bus_options_from_config(struct obx_bus_options *opts, const struct obx_config *cfg,
                                 const char *name);

/* One envelope to publish. Borrowed: valid only during obx_bus_send(). */
struct obx_bus_message {
    const char *id;      /* event id: Nats-Msg-Id and ce-id */
    const char *msg_id;  /* Nats-Msg-Id when it is not `id` (outboxctl's requeue); NULL: `id` */
    const char *subject; /* {prefix}.{aggregate_type}.{event_type} */
    const char *body;    /* the envelope JSON */
    size_t body_len;
    const char *ce_type;     /* {aggregate_type}.{event_type} */
    const char *ce_time;     /* occurred_at */
    const char *ce_subject;  /* aggregate_id */
    const char *traceparent; /* NULL when absent */
    const char *sequence;    /* aggregate_seq as decimal text; NULL for an unordered event */
};

enum obx_publish_outcome {
    OBX_PUBLISH_OK,       /* stored in the expected stream (a duplicate counts) */
    OBX_PUBLISH_REJECTED, /* the server refused this message: retry with backoff, spend an attempt
                           */
    OBX_PUBLISH_UNAVAILABLE, /* no ack for a transport reason: release, spend nothing */
    OBX_PUBLISH_TOO_LARGE,   /* can never fit max_payload: quarantine as invalid */
};

struct obx_publish_result {
    enum obx_publish_outcome outcome;
    int duplicate;                 /* JetStream said it already had this Nats-Msg-Id */
    unsigned long long stream_seq; /* OK from JetStream: the PubAck's stream sequence (of the
                                    * stored copy, for a duplicate); 0 otherwise */
    char reason[200];              /* why, for last_error; "" when OK */
};

struct obx_bus;

/*
 * Connects. If the server cannot be reached, returns OUTBOX_EUNAVAILABLE
 * and no bus; the caller retries with backoff. Once open, the bus
 * reconnects by itself forever.
 */
outbox_status obx_bus_open(const struct obx_bus_options *opts, struct obx_bus **out,
                           outbox_error *err);
void obx_bus_close(struct obx_bus *bus);

/* True while the connection is up (not reconnecting or closed). */
int obx_bus_is_connected(struct obx_bus *bus);

/* The server's max_payload in bytes, which bodies plus headers must fit. */
size_t obx_bus_max_payload(struct obx_bus *bus);

/*
 * The header that carries an ordered event's aggregate_seq (besides
 * ce-sequence), for readers that do not speak CloudEvents; in the style of
 * Nats-Msg-Id. Contract: docs/cloudevents.md, docs/ordering.md.
 */
#define OBX_BUS_SEQUENCE_HEADER "Outbox-Aggregate-Seq"

/* Bytes reserved for headers when checking a body against max_payload. */
#define OBX_BUS_HEADER_BUDGET 4096

/*
 * The largest body a server with this max_payload takes: what is left
 * after the header budget, or half of a max_payload too small for it. The
 * relay and the bus judge a body by this one rule, so a row is never
 * leased as fitting and then refused as too large.
 */
static inline size_t
obx_bus_body_limit(size_t max_payload)
{
    return max_payload > 2 * OBX_BUS_HEADER_BUDGET ? max_payload - OBX_BUS_HEADER_BUDGET
                                                   : max_payload / 2;
}

/*
 * Queues `count` messages for publishing without waiting for their acks.
 * Blocks only while the in-flight window is full. Returns OUTBOX_OK even
 * if some could not be queued: their outcome arrives through collect().
 * Fails only for programming errors (a batch already in flight).
 */
outbox_status obx_bus_send(struct obx_bus *bus, const struct obx_bus_message *msgs, size_t count,
                           outbox_error *err);

/*
 * Waits up to the publish timeout for the batch queued by obx_bus_send()
 * and writes one result per message, in send order, into `results`
 * (`count` entries, the same count). Messages without an ack by then are
 * OBX_PUBLISH_UNAVAILABLE (they may still land; republishing with the same
 * Nats-Msg-Id is deduplicated). Afterwards the bus accepts a new batch.
 */
outbox_status obx_bus_collect(struct obx_bus *bus, struct obx_publish_result *results, size_t count,
                              outbox_error *err);

#endif
