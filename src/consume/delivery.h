/* SPDX-License-Identifier: MIT */
/*
 * delivery.h - one fetched message as the consumer's parts see it: the
 * public outbox_delivery a handler reads, and the verdict its handlers
 * reach. The bottom of consume/: it calls nothing else in the folder.
 */
#ifndef OBX_DELIVERY_H
#define OBX_DELIVERY_H

#include "envelope/envelope.h"
#include "feed/feed.h"
#include "outbox/worker.h"

/* One message of a batch: who it is, and what its handlers decided. */
struct obx_msg_verdict {
    const char *event_id;     /* the envelope's id (borrowed from `env`): the ledger key */
    const char *aggregate_id; /* the envelope's aggregate id, to order the batch */
    struct obx_envelope env;  /* parsed envelope; empty when bad */
    int bad;                  /* not a valid envelope: nothing can run it */
    int matched;              /* handlers whose filter matched */
    int dead;                 /* of those, dead-lettered (now or earlier) */
    int nak;                  /* some handler must see it again */
    long long nak_due_ms;     /* the soonest of those, on the monotonic clock */
};

struct obx_claim_watch;

struct outbox_delivery {
    const struct obx_feed_msg *msg; /* borrowed from the batch */
    const char *event_id;           /* the envelope's id, borrowed */
    int attempts;
    const struct obx_claim_watch *watch;  /* external runs: their claim's renewal; else NULL */
    const struct obx_envelope_head *head; /* the parsed envelope, borrowed from the verdict */
};

/* The redelivery delay after a ledger failure; it spends no attempt. */
enum { OBX_LEDGER_OUTAGE_RETRY_MS = 1000 };

/*
 * Records a NAK for message `v`, due `delay_ms` from now (keeps the
 * soonest). The delay is counted from now, not from the NAK: the rest of
 * the batch may run long before it is sent.
 */
void obx_verdict_nak(struct obx_msg_verdict *v, long long delay_ms);

/* What is left of `v`'s NAK delay at `now_ms` (monotonic): at least 1 ms. */
long long obx_verdict_nak_delay_left(const struct obx_msg_verdict *v, long long now_ms);

#endif
