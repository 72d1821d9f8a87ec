/* SPDX-License-Identifier: MIT */
/*
 * consumer_upkeep.h - what a consumer does beside handling: its handlers'
 * dead-letter and parked gauges, and the retention passes (ledger rows,
 * and on the DB backend in mark mode outbox rows), on a thread and a
 * database session of their own, so that neither holds up a batch.
 */
#ifndef OBX_CONSUMER_UPKEEP_H
#define OBX_CONSUMER_UPKEEP_H

#include "ledger/ledger.h"
#include "store/store.h"
#include "support/worker.h"

struct outbox_consumer;

struct obx_consumer_upkeep {
    struct outbox_consumer *c; /* settings, handlers and the gauges written */
    struct obx_ledger *ledger; /* NULL until the database first answers */
    int ledger_up;             /* the session answered its last statement */
    struct obx_store *store;   /* the outbox pass's session (OUTBOX_BUS=db, mark mode); or NULL */
    long long next_sample_ms;  /* monotonic times of the next sample and retention pass */
    long long next_retention_ms;
    struct obx_side_thread side; /* runs until _stop(), after its owner's loop */
};

/*
 * Starts the upkeep of consumer `c`: a sample at once and then every few
 * seconds, and a retention pass every few minutes, or sooner while old
 * rows are left, until obx_consumer_upkeep_stop(). Returns 0, or an errno value
 * when the thread cannot start.
 */
int obx_consumer_upkeep_start(struct obx_consumer_upkeep *u, struct outbox_consumer *c);

/* Ends the upkeep (a pass in progress at its next batch) and closes its session. */
void obx_consumer_upkeep_stop(struct obx_consumer_upkeep *u);

#endif
