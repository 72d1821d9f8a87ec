/* SPDX-License-Identifier: MIT */
/*
 * relay_upkeep.h - what a relay does beside claiming: its health gauges and,
 * in mark mode, the retention pass, on a thread and a database session of
 * their own, so that neither ever holds up a claim.
 */
#ifndef OBX_RELAY_UPKEEP_H
#define OBX_RELAY_UPKEEP_H

#include "outbox/worker.h"
#include "store/store.h"
#include "support/worker.h"

struct obx_relay_upkeep {
    struct obx_worker *w;         /* settings and the gauges written */
    struct obx_store *store;      /* NULL until the database first answers */
    int store_up;                 /* the session answered its last statement */
    struct obx_store_health last; /* the last sample, for the per-lease figures */
    long long next_retention_ms;  /* monotonic time of the next retention pass */
    struct obx_side_thread side;  /* runs until _stop(), after its owner's loop */
};

/*
 * Starts the upkeep of worker `w` (its settings and gauges): a
 * sample at once and then every few seconds, and a retention pass every
 * half minute, or sooner while old rows are left, until obx_relay_upkeep_stop().
 * Returns 0, or an errno value when the thread cannot start.
 */
int obx_relay_upkeep_start(struct obx_relay_upkeep *u, struct obx_worker *w);

/* Ends the upkeep (a pass in progress at its next batch) and closes its session. */
void obx_relay_upkeep_stop(struct obx_relay_upkeep *u);

#endif
