/* SPDX-License-Identifier: MIT */
/*
 * parked_feed.c - a handler's parked events as a feed (parked_feed.h).
 *
 * A parked message carries what the delivered one did: its message id,
 * subject and body. It has no headers (like the DB feed's), so the
 * consumer's message check reads the same envelope, id and route again.
 */
#include "parked_feed.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { PARK_LEASE_MAX_S = 10 }; /* see obx_parked_feed_open() */

struct parked_feed {
    struct obx_ledger *ledger;
    const char *handler;
    int lease_seconds;
};

struct parked_batch {
    struct obx_parked_set set;
};

static outbox_status
parked_fetch(struct obx_feed *feed, size_t max, int timeout_ms, struct obx_feed_batch *out,
             outbox_error *err)
{
    struct parked_feed *pf = feed->impl;
    struct parked_batch *pb = calloc(1, sizeof(*pb));
    outbox_status st;

    (void)timeout_ms; /* parked events are there or not: nothing to wait for */
    memset(out, 0, sizeof(*out));
    if (pb == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "parked events: out of memory");
    }
    st = obx_ledger_parked_take(pf->ledger, pf->handler, max > 1000 ? 1000 : (int)max,
                                pf->lease_seconds, &pb->set, err);
    if (st == OUTBOX_OK && pb->set.count > 0) {
        out->msgs = calloc(pb->set.count, sizeof(*out->msgs));
        st = out->msgs != NULL ? OUTBOX_OK
                               : obx_fail(err, OUTBOX_ENOMEM, "parked events: out of memory");
    }
    if (st != OUTBOX_OK) {
        obx_parked_set_fini(&pb->set);
        free(pb);
        return st;
    }
    for (size_t i = 0; i < pb->set.count; i++) {
        const struct obx_parked *p = &pb->set.rows[i];

        out->msgs[i] = (struct obx_feed_msg){.event_id = p->message_id,
                                             .subject = p->subject,
                                             .envelope = p->envelope,
                                             .envelope_len = p->envelope_len,
                                             .deliveries = 1};
    }
    out->count = pb->set.count;
    out->impl = pb;
    return OUTBOX_OK;
}

static outbox_status
settle_rows(struct obx_feed *feed, struct obx_feed_batch *batch, size_t from, size_t to,
            const long long *delay_ms, int extend_seconds, outbox_error *err)
{
    struct parked_feed *pf = feed->impl;
    struct parked_batch *pb = batch->impl;
    const struct obx_parked **rows = calloc(to - from + 1, sizeof(*rows));
    outbox_status st;

    if (rows == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "parked events: out of memory");
    }
    for (size_t i = from; i < to; i++) {
        rows[i - from] = &pb->set.rows[i];
    }
    st = obx_ledger_parked_settle(pf->ledger, pf->handler, rows, delay_ms, to - from,
                                  extend_seconds, err);
    free(rows);
    return st;
}

static outbox_status
parked_in_progress(struct obx_feed *feed, struct obx_feed_batch *batch, size_t i, outbox_error *err)
{
    struct parked_feed *pf = feed->impl;

    if (batch->impl == NULL || i >= batch->count) {
        return OUTBOX_OK;
    }
    return settle_rows(feed, batch, i, i + 1, NULL, pf->lease_seconds, err);
}

/* Ack and terminate remove the parked row; nak gives it back after the delay. */
static outbox_status
parked_settle(struct obx_feed *feed, struct obx_feed_batch *batch, const enum obx_settle *what,
              const long long *delay_ms, outbox_error *err)
{
    long long *delays = calloc(batch->count + 1, sizeof(*delays));
    outbox_status st;

    if (batch->impl == NULL || batch->count == 0) {
        free(delays);
        return OUTBOX_OK;
    }
    if (delays == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "parked events: out of memory");
    }
    for (size_t i = 0; i < batch->count; i++) {
        delays[i] = what[i] == OBX_SETTLE_NAK ? (delay_ms[i] > 0 ? delay_ms[i] : 0) : -1;
    }
    st = settle_rows(feed, batch, 0, batch->count, delays, 0, err);
    free(delays);
    return st;
}

static void
parked_batch_fini(struct obx_feed *feed, struct obx_feed_batch *batch)
{
    struct parked_batch *pb = batch->impl;

    (void)feed;
    if (pb != NULL) {
        obx_parked_set_fini(&pb->set);
        free(pb);
    }
    free(batch->msgs);
    memset(batch, 0, sizeof(*batch));
}

static void
parked_close(struct obx_feed *feed)
{
    if (feed != NULL) {
        free(feed->impl);
        free(feed);
    }
}

static const struct obx_feed_ops parked_ops = {
    .fetch = parked_fetch,
    .in_progress = parked_in_progress,
    .settle = parked_settle,
    .connected = NULL,
    .batch_fini = parked_batch_fini,
    .close = parked_close,
};

struct obx_feed *
obx_parked_feed_open(struct obx_ledger *ledger, const char *handler, int ledger_lease_seconds)
{
    struct obx_feed *feed = obx_feed_alloc(&parked_ops, sizeof(struct parked_feed));
    struct parked_feed *pf;

    if (feed == NULL) {
        return NULL;
    }
    pf = feed->impl;
    pf->ledger = ledger;
    pf->handler = handler;
    pf->lease_seconds = ledger_lease_seconds > 0 && ledger_lease_seconds < PARK_LEASE_MAX_S
                            ? ledger_lease_seconds
                            : PARK_LEASE_MAX_S;
    feed->held_seconds = pf->lease_seconds;
    return feed;
}
