/* SPDX-License-Identifier: MIT */
/*
 * relay_internal.h - the relay object, shared by relay.c (the loop) and
 * relay_options.c (defaults, checks, copies).
 */
#ifndef OBX_RELAY_INTERNAL_H
#define OBX_RELAY_INTERNAL_H

#include <pthread.h>
#include <signal.h>

#include "bus.h"
#include "outbox/worker.h"
#include "owned_strings.h"
#include "store.h"

struct outbox_relay {
    outbox_relay_options opts;            /* strings borrow from `owned` */
    struct obx_owned_strings owned;       /* copies of the option strings */
    char default_name[96];                /* host-pid when no name was given */
    volatile sig_atomic_t stop_requested; /* set by outbox_relay_stop() */
    int fresh_batches;                    /* batches with a first-time ack (test hook) */
    pthread_mutex_t stats_lock;
    outbox_relay_stats stats;      /* guarded by stats_lock */
    struct obx_store *store;       /* NULL while the database is away */
    struct obx_bus *bus;           /* NULL until the broker first answers */
    int stream_ready;              /* JetStream stream created or checked */
    int db_pause_ms, bus_pause_ms; /* growing pauses while a server is away */
    long long next_maintenance_ms; /* monotonic time of the next retention pass */
};

/* Copies and checks options into `relay` (strings duplicated). */
outbox_status obx_relay_options_adopt(struct outbox_relay *relay, const outbox_relay_options *opts,
                                      outbox_error *err);
void obx_relay_options_release(struct outbox_relay *relay);

#endif
