/* SPDX-License-Identifier: MIT */
/*
 * relay_gauges.h - the relay's health gauges, sampled on their own thread
 * and their own database session, so that a slow sample never holds up a
 * claim.
 */
#ifndef OBX_RELAY_GAUGES_H
#define OBX_RELAY_GAUGES_H

#include <pthread.h>

#include "outbox/worker.h"
#include "store/store.h"
#include "support/worker.h"

struct obx_relay_gauges {
    struct obx_worker *w;         /* settings, stop flag and the gauges written */
    struct obx_store *store;      /* NULL until the database first answers */
    int store_up;                 /* the session answered its last statement */
    struct obx_store_health last; /* the last sample, for the per-lease figures */
    pthread_t thread;
    int started;
};

/*
 * Starts sampling for worker `w` (its gauges, its stop flag), at once and
 * then every few seconds until the worker stops. Returns 0, or an errno
 * value when the thread cannot start (then nothing is sampled).
 */
int obx_relay_gauges_start(struct obx_relay_gauges *g, struct obx_worker *w);

/* Waits for the sampler to end (the worker must be stopping) and closes its session. */
void obx_relay_gauges_stop(struct obx_relay_gauges *g);

#endif
