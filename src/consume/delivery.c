/* SPDX-License-Identifier: MIT */
/*
 * delivery.c - what a handler may read of the event it is given, and the
 * verdict bookkeeping every part of the consumer shares.
 */
#include "delivery.h"

#include "claim_keeper.h"
#include "common/clock.h"

#include "common/banned.h" /* last: poisons unsafe functions */

void
obx_verdict_nak(struct obx_msg_verdict *v, long long delay_ms)
{
    long long due_ms = obx_monotonic_ms() + delay_ms;

    if (!v->nak || due_ms < v->nak_due_ms) {
        v->nak_due_ms = due_ms;
    }
    v->nak = 1;
}

long long
obx_verdict_nak_delay_left(const struct obx_msg_verdict *v, long long now_ms)
{
    return v->nak_due_ms - now_ms > 1 ? v->nak_due_ms - now_ms : 1;
}

const char *
outbox_delivery_event_id(const outbox_delivery *d)
{
    return d->event_id;
}

const char *
outbox_delivery_subject(const outbox_delivery *d)
{
    return d->msg->subject;
}

const char *
outbox_delivery_envelope(const outbox_delivery *d, size_t *len)
{
    if (len != NULL) {
        *len = d->msg->envelope_len;
    }
    return d->msg->envelope;
}

int
outbox_delivery_attempts(const outbox_delivery *d)
{
    return d->attempts;
}

int
outbox_delivery_claim_lost(const outbox_delivery *d)
{
    return d->watch != NULL && obx_claim_watch_lost(d->watch);
}
