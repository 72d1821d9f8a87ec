/* SPDX-License-Identifier: MIT */
/*
 * relay_internal.h - the relay object, shared by relay.c (the loop) and
 * relay_config.c (the checks on its configuration).
 */
#ifndef OBX_RELAY_INTERNAL_H
#define OBX_RELAY_INTERNAL_H

#include "bus/bus.h"
#include "config/settings.h"
#include "outbox/worker.h"
#include "relay_claim_switch.h"
#include "relay_gate.h"
#include "relay_test_hooks.h"
#include "relay_upkeep.h"
#include "store/store.h"
#include "support/worker.h"

enum {
    OBX_RELAY_STAT_COUNT = OUTBOX_RELAY_BLOCKED_AGGREGATES + 1,
    OBX_RELAY_HISTOGRAM_COUNT = OUTBOX_RELAY_PUBLISH_SECONDS + 1,
};

struct outbox_relay {
    struct obx_worker w;               /* configuration, name, stop flag, counters */
    struct obx_worker_link db, broker; /* the run thread's view of each server */
    struct obx_relay_test_hooks hooks; /* tests only; all zero otherwise */
    int fresh_batches;                 /* batches with a first-time ack (test hook) */
    struct obx_store *store;           /* NULL until the database first answers; then reconnected */
    struct obx_bus *bus;               /* NULL until the broker first answers */
    struct obx_relay_gate gate;        /* room in a shared window (a fleet's); all zero: none */
    int stream_ready;                  /* JetStream stream created or checked */
    struct obx_relay_upkeep upkeep;    /* gauges and retention, on their own thread and session */
    int two_writes;                    /* the bench's comparison: lease, then finish */
    int no_upkeep;                     /* the bench's baseline: no gauges, no retention */
};

/* The rules of a relay's configuration that need more than one setting. */
outbox_status obx_relay_config_check(const struct obx_config *cfg, outbox_error *err);

#endif
