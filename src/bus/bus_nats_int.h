/* SPDX-License-Identifier: MIT */
/*
 * bus_nats_int.h - what the three files of the nats bus share:
 * bus_window_nats.c (references, the in-flight window, acks), bus_nats.c
 * (connection, callbacks, lifetime) and bus_batch_nats.c (send, collect).
 * They stand in that order: each calls only the ones before it. Nothing
 * else includes it.
 *
 * Locking: fields under "shared" are read and written under mu only, by
 * the owner's thread and by nats.c's threads; the rest belong to the
 * owner's thread. A function ending in _locked expects mu held.
 */
#ifndef OBX_BUS_NATS_INT_H
#define OBX_BUS_NATS_INT_H

#include <pthread.h>
#include <stddef.h>
#include <time.h>

#include <nats/nats.h>

#include "bus.h"
#include "support/nats_auth_nats.h"

#define NOTE_NO_ACK        "no ack within the publish timeout"
#define NOTE_LOST          "nats connection lost before the ack"
#define NOTE_NOT_CONNECTED "nats is not connected"

struct slot {
    unsigned char outcome; /* enum obx_publish_outcome */
    unsigned char waiting; /* handed to nats.c, no answer yet */
    unsigned char duplicate;
    unsigned long long seq; /* the PubAck's stream sequence; 0 without one */
    const char *note;       /* static reason, or NULL */
    const char *detail;     /* static, appended to note, or NULL */
    char *text;             /* owned reason (server text), or NULL */
};

struct ring_entry {
    natsMsg *msg; /* NULL: answered, a hole the head skips */
    size_t index; /* into the batch */
};

struct obx_bus {
    /* Fixed at open. */
    enum obx_bus_kind kind;
    char *stream;                /* owned */
    char *ce_source;             /* owned */
    char *name;                  /* owned */
    char *url_redacted;          /* owned; for logs */
    struct obx_nats_hints hints; /* what to check when NATS refuses TLS or credentials */
    int publish_timeout_ms;
    size_t window;     /* max_in_flight */
    natsOptions *opts; /* owned; kept to reopen a connection the server closed for good */

    /* The owner's thread only. */
    natsConnection *nc;
    jsCtx *js;
    int js_used; /* js has published asynchronously at least once */
    long long last_reopen_ms;
    size_t max_payload_bytes; /* last known; kept while disconnected */
    struct slot *slots;       /* the batch; owner writes a slot only while it is not in the ring */
    size_t slots_cap;
    size_t batch_count;
    int batch_open;

    /* Shared with nats.c's threads, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int refs;
    int closing;
    natsConnection *live_nc;    /* whose disconnects concern the batch */
    unsigned lost_epoch;        /* bumped on every disconnect or close of live_nc */
    unsigned batch_epoch;       /* lost_epoch when the batch started */
    long long last_progress_ms; /* last publish or ack */
    struct ring_entry *ring;    /* window entries */
    size_t ring_head, ring_used, ring_live;
};

/* bus_window_nats.c */

/* Drops one reference and releases mu; frees the bus with the last one. */
void obx_bus_unref_unlock(struct obx_bus *bus);

/* Takes back the messages nats.c still holds unacked and destroys them. */
void obx_bus_reclaim_pending(struct obx_bus *bus);

/* Waits on the bus's condition until `deadline_ms` (monotonic) at the latest. */
void obx_bus_wait_until_locked(struct obx_bus *bus, long long deadline_ms);

/* Sets a slot's outcome with a static reason (`note`, then `: detail` when not NULL). */
void obx_bus_slot_set(struct slot *sl, enum obx_publish_outcome outcome, const char *note,
                      const char *detail);

/* Like obx_bus_slot_set with a formatted reason; falls back to `fallback` without memory. */
void obx_bus_slot_textf(struct slot *sl, enum obx_publish_outcome outcome, const char *fallback,
                        const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Puts a published message into the window, for batch slot `index`. */
void obx_bus_ring_push_locked(struct obx_bus *bus, natsMsg *msg, size_t index);

/* Takes `msg` out of the window; 1 with its slot in *index, 0 when it was not there. */
int obx_bus_ring_take_locked(struct obx_bus *bus, const natsMsg *msg, size_t *index);

/* Every message still in the window gets `note`; the window is emptied. */
void obx_bus_ring_abandon_locked(struct obx_bus *bus, const char *note);

/* nats.c's AckHandler: settles the message's slot if it is still in the window. */
void obx_bus_on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure);

void obx_bus_slots_free(struct obx_bus *bus);

/* bus_nats.c */

/* Replaces a connection nats.c closed for good, at most once per reconnect wait. */
void obx_bus_reopen_if_closed(struct obx_bus *bus);

/* Connected right now; unlike obx_bus_is_connected() never reopens anything. */
int obx_bus_connected_now(struct obx_bus *bus);

#endif
