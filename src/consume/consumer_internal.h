/* SPDX-License-Identifier: MIT */
/*
 * consumer_internal.h - the consumer object, shared by consumer.c (the
 * loop) and consumer_config.c (the checks on its configuration, the
 * handler registry).
 */
#ifndef OBX_CONSUMER_INTERNAL_H
#define OBX_CONSUMER_INTERNAL_H

#include "claim_keeper.h"
#include "config/settings.h"
#include "consumer_test_hooks.h"
#include "consumer_upkeep.h"
#include "delivery.h"
#include "feed/feed.h"
#include "handler.h"
#include "ledger/ledger.h"
#include "outbox/worker.h"
#include "support/worker.h"

enum {
    OBX_CONSUMER_STAT_COUNT = OUTBOX_CONSUMER_PARKED_TAKES + 1,
    OBX_CONSUMER_HISTOGRAM_COUNT = OUTBOX_CONSUMER_BATCH_SECONDS + 1,
    OBX_HANDLER_STAT_COUNT = OUTBOX_HANDLER_OLDEST_PARKED_SECONDS + 1,
};

struct outbox_consumer {
    struct obx_worker w;                  /* configuration, name, stop flag, counters */
    struct obx_worker_link db, feed_link; /* the run thread's view of each server */
    struct obx_consumer_test_hooks hooks; /* tests only; all zero otherwise */
    struct obx_handler handlers[OBX_MAX_HANDLERS];
    int handler_count;
    struct obx_ledger *ledger;         /* NULL until the database first answers; then reconnected */
    struct obx_feed *feed;             /* NULL while its server is away */
    struct obx_claim_keeper *keeper;   /* with external handlers, while running; else NULL */
    struct obx_consumer_upkeep upkeep; /* gauges and retention, on their own thread and session */
    long long next_register_ms;        /* monotonic time of the handlers' next registration */
    long long next_sweep_ms;           /* monotonic time of the next sweep of parked events */
    size_t batch_ordered;              /* ordered events in the batch in hand */
    unsigned long long handler_stats[OBX_MAX_HANDLERS][OBX_HANDLER_STAT_COUNT]; /* w.stats_lock */
    /* The ledger's handlers no daemon runs (an SQL API's), for their gauges; w.stats_lock. */
    struct obx_other_handler_gauges others[OBX_OTHER_HANDLERS_MAX];
    size_t other_count;
    unsigned int jitter_seed;       /* rand_r() state, its own per replica; the run thread's */
    long long outage_since_ms;      /* monotonic start of handler runs given back; 0: none */
    long long outage_logged_ms;     /* when that was last logged */
    unsigned long long outage_runs; /* runs given back since outage_since_ms */
    int handling;                   /* w.stats_lock: handlers run on a fetched batch */
};

/* The rules of a consumer's configuration that need more than one setting. */
outbox_status obx_consumer_config_check(const struct obx_config *cfg, outbox_error *err);

#endif
