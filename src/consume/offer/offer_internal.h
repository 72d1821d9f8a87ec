/* SPDX-License-Identifier: MIT */
/*
 * offer_internal.h - what the parts of an offer share: the offer (one
 * handler over the messages of one fetched batch it matches), its slots'
 * verdicts and deliveries, the settling of a claim's state or a handler's
 * failure (settle.c), and the two ways to run it (transactional.c,
 * external.c).
 */
#ifndef OBX_CONSUME_OFFER_INTERNAL_H
#define OBX_CONSUME_OFFER_INTERNAL_H

#include <stddef.h>

#include "consume/consumer_offer.h"

enum {
    CLAIM_LOCK_WAIT_MS = 1000, /* wait for a claim another transaction holds */
};

/* The messages of the batch `h` matches, as ledger events. */
struct offer {
    const struct obx_offer_env *env;
    struct obx_offer_tally *tally;
    const struct obx_handler *h;
    struct obx_feed_batch *batch;
    struct obx_msg_verdict *verdicts;
    size_t count;
    size_t *msg_index; /* offer slot -> batch message */
    struct obx_ledger_event *events;
    struct obx_claim *claims;
    outbox_handler_result *results; /* per slot, for RUN claims */
    char (*reasons)[512];           /* per slot, for FAIL */
    unsigned char *rerun;           /* per slot: RETRY in a batch, to run again alone */
    long long *retry_ms;            /* per slot, external RETRY: the delay asked for; 0: backoff */
    unsigned char *dead_now;        /* per slot, external FAIL: dead-letter at once */
    long only_msg;                  /* a second chance: this batch message only; else -1 */
};

static inline struct obx_msg_verdict *
verdict(struct offer *o, size_t slot)
{
    return &o->verdicts[o->msg_index[slot]];
}

/* The delivery handed to the handler for slot k. */
static inline struct outbox_delivery
delivery_of(const struct offer *o, size_t k)
{
    return (struct outbox_delivery){.msg = &o->batch->msgs[o->msg_index[k]],
                                    .event_id = o->events[k].event_id,
                                    .attempts = o->claims[k].attempts,
                                    .head = &o->verdicts[o->msg_index[k]].env.head};
}

/* Claims of slots [from, to) that need no run: done, dead (skip), held or backing off (later). */
void obx_offer_claim_states_in(struct offer *o, size_t from, size_t to);

/* Keeps slot k's failure reason for the ledger, and counts a run given back in an outage. */
void obx_offer_keep_reason(struct offer *o, size_t k, const outbox_error *herr);

/* Writes the outcome of slot k's failure or retry into the ledger and the verdict. */
outbox_status obx_offer_settle_unhandled(struct offer *o, size_t k, outbox_error *err);

/* The batch in one ledger transaction: claim, run each event, mark done, commit. */
outbox_status obx_offer_transactional(struct offer *o, outbox_error *err);

/* Each event claimed before its run outside any transaction, done marked after it. */
outbox_status obx_offer_external(struct offer *o, outbox_error *err);

#endif
