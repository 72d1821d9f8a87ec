/* SPDX-License-Identifier: MIT */
/*
 * consumer_offer.h - one handler over one fetched batch, through the
 * ledger (consumer_offer.c). It sees only what it is handed here, never
 * the consumer itself, and reports what happened in a tally the loop adds
 * to its statistics.
 */
#ifndef OBX_CONSUMER_OFFER_H
#define OBX_CONSUMER_OFFER_H

#include "claim_keeper.h"
#include "config/settings.h"
#include "delivery.h"
#include "feed/feed.h"
#include "handler.h"
#include "ledger/ledger.h"
#include "outbox/worker.h"

/* What an offer works with; all borrowed from the consumer for the call. */
struct obx_offer_env {
    struct obx_ledger *ledger;
    struct obx_feed *feed;
    const struct obx_config *cfg;
    unsigned int *jitter_seed;       /* rand_r() state of the consumer's run thread */
    struct obx_claim_keeper *keeper; /* renews external claims while they run; may be NULL */
};

/* What an offer did, for the consumer's counters. */
struct obx_offer_tally {
    unsigned long long handled, skipped, deferred, failed, retried, dead, ledger_errors;
    unsigned long long claims;    /* claims made through the ledger */
    unsigned long long conflicts; /* of those, held by another replica */
    unsigned long long outages;   /* runs given back: the database or an endpoint was away */
    unsigned long long lost;      /* external runs whose claim was lost while they ran */
    unsigned long long parked;    /* ordered events parked until their predecessor is done */
    unsigned long long ordered;   /* ordered events offered (a sweep of parked ones follows) */
    char outage_reason[256];      /* the last of those outages, for the log */
};

/*
 * Offers every message of `batch` that `h` matches to `h`, through the
 * ledger, updates `verdicts` and adds to `tally`. Returns
 * OUTBOX_EUNAVAILABLE when the ledger connection broke (the messages it did
 * not settle get a NAK).
 */
outbox_status obx_consumer_offer(const struct obx_offer_env *env, const struct obx_handler *h,
                                 struct obx_feed_batch *batch, struct obx_msg_verdict *verdicts,
                                 struct obx_offer_tally *tally, outbox_error *err);

#endif
