/* SPDX-License-Identifier: MIT */
/*
 * js_admin.h - what outboxctl reads from NATS: the stream's settings and
 * state, its durable consumers, a message by sequence, the whole stream in
 * order, the account's storage and the server's version. Nothing here
 * changes the stream or a consumer; publishing goes through the relay's
 * bus (bus/bus.h), so what outboxctl republishes is what the relay sends.
 *
 * No nats.c type leaves js_admin_nats.c. A connection belongs to one
 * thread. Every function returns OUTBOX_EUNAVAILABLE while NATS or
 * JetStream cannot be reached.
 */
#ifndef OBX_CTL_JS_ADMIN_H
#define OBX_CTL_JS_ADMIN_H

#include <stddef.h>

#include <jansson.h>

#include "config/settings.h"
#include "outbox/outbox.h"

struct obx_ctl_js;

/* Connects with the OUTBOX_NATS_* settings (URL, credentials, TLS), 2 s per attempt. */
outbox_status obx_ctl_js_open(const struct obx_config *cfg, struct obx_ctl_js **out,
                              outbox_error *err);
void obx_ctl_js_close(struct obx_ctl_js *js);

/* The server's max_payload in bytes. */
size_t obx_ctl_js_max_payload(struct obx_ctl_js *js);

struct obx_ctl_stream {
    int exists; /* 0: no such stream (the rest is zero) */
    unsigned long long messages, bytes, first_seq, last_seq;
    long long created_unix_ms;
    long long first_unix_ms; /* the oldest message's time; 0 when empty */
    long long max_age_seconds, duplicate_window_seconds, max_bytes, max_msgs;
    long long replicas;
    char retention[16]; /* limits, interest, workqueue */
    char storage[8];    /* file, memory */
    int deny_delete, deny_purge;
    char subjects[256]; /* comma-separated */
};

outbox_status obx_ctl_js_stream(struct obx_ctl_js *js, const char *name, struct obx_ctl_stream *out,
                                outbox_error *err);

/* Messages per subject held by the stream: a new object {subject: count}. */
outbox_status obx_ctl_js_subject_counts(struct obx_ctl_js *js, const char *stream, json_t **out,
                                        outbox_error *err);

/*
 * The stream's durable consumers: a new array of {name, filter_subject,
 * num_pending, num_ack_pending, num_redelivered, ack_floor_stream_seq}.
 */
outbox_status obx_ctl_js_consumers(struct obx_ctl_js *js, const char *stream, json_t **out,
                                   outbox_error *err);

struct obx_ctl_js_msg {
    int found;        /* 0: no message at that sequence (expired, or never) */
    char msg_id[128]; /* its Nats-Msg-Id; "" without one */
    char subject[256];
    long long unix_ms; /* when the stream stored it */
};

/* Message `seq` of `stream`. */
outbox_status obx_ctl_js_message(struct obx_ctl_js *js, const char *stream, unsigned long long seq,
                                 struct obx_ctl_js_msg *out, outbox_error *err);

/* One message of a walk; borrowed for the call. */
struct obx_ctl_js_seen {
    unsigned long long seq;
    const char *msg_id; /* "" without one */
    long long unix_ms;  /* when the stream stored it */
    const char *data;   /* the body, `len` bytes, not terminated */
    size_t len;
};

/* Called for each message of a walk; returns 0 to go on. */
typedef int (*obx_ctl_js_each_fn)(void *ctx, const struct obx_ctl_js_seen *m);

/*
 * Reads every message of `stream` in order, from the first, through an
 * ephemeral ordered consumer (acks nothing, changes nothing), up to the
 * last sequence the stream had when the walk began; `*count` gets how
 * many were read.
 */
outbox_status obx_ctl_js_walk(struct obx_ctl_js *js, const char *stream, obx_ctl_js_each_fn each,
                              void *ctx, unsigned long long *count, outbox_error *err);

struct obx_ctl_js_account {
    unsigned long long storage_bytes, memory_bytes;
    long long max_storage, max_memory; /* -1: no account limit */
    long long streams;
};

outbox_status obx_ctl_js_account(struct obx_ctl_js *js, struct obx_ctl_js_account *out,
                                 outbox_error *err);

/*
 * The version a server at the first of the OUTBOX_NATS_URL URLs announces
 * in its INFO line ("2.9.10"), read over a plain TCP connection (servers
 * send INFO before any TLS handshake). server_info.c.
 */
outbox_status obx_ctl_nats_server_version(const char *nats_url, char *out, size_t cap,
                                          outbox_error *err);

#endif
