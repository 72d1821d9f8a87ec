/* SPDX-License-Identifier: MIT */
/*
 * bus_window_nats.c - what the bus shares with nats.c's threads: the
 * reference count, the in-flight window of published messages and their
 * slots, and the ack callback that settles them.
 *
 * A published message sits in the ring until nats.c hands its ack to
 * obx_bus_on_ack() on one of its threads; collect() or close() empties the
 * ring and takes nats.c's pending list back, so a late ack finds nothing
 * and can never settle a row of the next batch. Both other halves of the
 * bus (bus_nats.c: connection and lifetime; bus_batch_nats.c: send and
 * collect) stand on this file; it calls neither.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nats/nats.h>

#include "bus.h"
#include "bus_nats_int.h"
#include "common/text.h"
#include "support/pause.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define REASON_CAP 200 /* sizeof(obx_publish_result.reason) */

static void
bus_free(struct obx_bus *bus)
{
    pthread_cond_destroy(&bus->cond);
    pthread_mutex_destroy(&bus->mu);
    free(bus->ring);
    free(bus->stream);
    free(bus->ce_source);
    free(bus->name);
    free(bus->url_redacted);
    free(bus);
}

/* Drops one reference and releases mu; frees the bus with the last one. */
void
obx_bus_unref_unlock(struct obx_bus *bus)
{
    int last = --bus->refs == 0;

    pthread_mutex_unlock(&bus->mu);
    if (last) {
        bus_free(bus);
    }
}

/* Gives nats.c's unacked messages back to us and destroys them. */
void
obx_bus_reclaim_pending(struct obx_bus *bus)
{
    natsMsgList pending = {NULL, 0};
    int count;

    /* nats.c 3.4.1 dereferences its pending map, created by the first async publish. */
    if (bus->js == NULL || !bus->js_used ||
        js_PublishAsyncGetPendingList(&pending, bus->js) != NATS_OK) {
        return;
    }
    count = pending.Count;
    natsMsgList_Destroy(&pending);
    pthread_mutex_lock(&bus->mu);
    bus->refs -= count; /* the owner's reference is still held: never the last */
    pthread_mutex_unlock(&bus->mu);
}

void
obx_bus_wait_until_locked(struct obx_bus *bus, long long deadline_ms)
{
    struct timespec ts = {.tv_sec = deadline_ms / 1000, .tv_nsec = (deadline_ms % 1000) * 1000000};

    pthread_cond_timedwait(&bus->cond, &bus->mu, &ts);
}

void
obx_bus_slot_set(struct slot *sl, enum obx_publish_outcome outcome, const char *note,
                 const char *detail)
{
    sl->outcome = (unsigned char)outcome;
    sl->waiting = 0;
    sl->note = note;
    sl->detail = detail;
}

/* Like slot_set with a formatted reason; falls back to a static one without memory. */
void
obx_bus_slot_textf(struct slot *sl, enum obx_publish_outcome outcome, const char *fallback,
                   const char *fmt, ...)
{
    va_list ap;

    obx_bus_slot_set(sl, outcome, fallback, NULL);
    free(sl->text);
    sl->text = malloc(REASON_CAP);
    if (sl->text != NULL) {
        va_start(ap, fmt);
        vsnprintf(sl->text, REASON_CAP, fmt, ap);
        va_end(ap);
    }
}

void
obx_bus_ring_push_locked(struct obx_bus *bus, natsMsg *msg, size_t index)
{
    struct ring_entry *e = &bus->ring[(bus->ring_head + bus->ring_used) % bus->window];

    e->msg = msg;
    e->index = index;
    bus->ring_used++;
    bus->ring_live++;
}

/* Acks come back in publish order, so the scan usually stops at the head. */
int
obx_bus_ring_take_locked(struct obx_bus *bus, const natsMsg *msg, size_t *index)
{
    for (size_t i = 0; i < bus->ring_used; i++) {
        struct ring_entry *e = &bus->ring[(bus->ring_head + i) % bus->window];

        if (e->msg == msg) {
            *index = e->index;
            e->msg = NULL;
            bus->ring_live--;
            while (bus->ring_used > 0 && bus->ring[bus->ring_head].msg == NULL) {
                bus->ring_head = (bus->ring_head + 1) % bus->window;
                bus->ring_used--;
            }
            return 1;
        }
    }
    return 0;
}

/* Every message still in the window gets `note`; the window is emptied. */
void
obx_bus_ring_abandon_locked(struct obx_bus *bus, const char *note)
{
    for (size_t i = 0; i < bus->ring_used; i++) {
        struct ring_entry *e = &bus->ring[(bus->ring_head + i) % bus->window];

        if (e->msg != NULL) {
            obx_bus_slot_set(&bus->slots[e->index], OBX_PUBLISH_UNAVAILABLE, note, NULL);
        }
    }
    bus->ring_head = bus->ring_used = bus->ring_live = 0;
}

/* Errors that mean "the broker cannot store anything right now", not "this message is bad". */
static int
js_code_is_transport(int code)
{
    switch (code) {
    case 10002: /* account resource limits exceeded */
    case 10008: /* jetstream system temporarily unavailable */
    case 10009: /* cluster cannot handle the request (no leader) */
    case 10023: /* insufficient resources */
    case 10028: /* insufficient memory */
    case 10039: /* jetstream not enabled for the account */
    case 10041: /* general raft error */
    case 10047: /* insufficient storage */
    case 10053: /* stream limits exceeded (discard new) */
    case 10059: /* stream not found */
    case 10060: /* expected stream does not match: ExpectStream */
    case 10076: /* jetstream not enabled */
    case 10077: /* storing the message failed */
        return 1;
    default:
        return 0;
    }
}

static void
classify_locked(struct obx_bus *bus, struct slot *sl, const jsPubAck *pa, const jsPubAckErr *pae)
{
    if (pa != NULL && pa->Stream != NULL && strcmp(pa->Stream, bus->stream) == 0) {
        obx_bus_slot_set(sl, OBX_PUBLISH_OK, NULL, NULL);
        sl->duplicate = pa->Duplicate ? 1 : 0;
        sl->seq = pa->Sequence;
    } else if (pa != NULL) {
        obx_bus_slot_textf(sl, OBX_PUBLISH_UNAVAILABLE, "acked by another stream",
                           "acked by stream %s, expected %s", pa->Stream ? pa->Stream : "?",
                           bus->stream);
    } else if (pae == NULL) {
        obx_bus_slot_set(sl, OBX_PUBLISH_UNAVAILABLE, "empty ack", NULL);
    } else if (pae->Err == NATS_ERR && pae->ErrCode != 0 && !js_code_is_transport(pae->ErrCode)) {
        obx_bus_slot_textf(sl, OBX_PUBLISH_REJECTED, "jetstream refused the message",
                           "jetstream refused the message: %s (err_code=%d)",
                           pae->ErrText ? pae->ErrText : "", (int)pae->ErrCode);
    } else if (pae->ErrCode != 0) {
        obx_bus_slot_textf(sl, OBX_PUBLISH_UNAVAILABLE, "jetstream cannot store messages now",
                           "jetstream cannot store messages now: %s (err_code=%d)",
                           pae->ErrText ? pae->ErrText : "", (int)pae->ErrCode);
    } else if (pae->Err == NATS_NO_RESPONDERS) {
        obx_bus_slot_set(sl, OBX_PUBLISH_UNAVAILABLE,
                         "no responders: no stream captures the subject, or jetstream is down",
                         NULL);
    } else {
        obx_bus_slot_set(sl, OBX_PUBLISH_UNAVAILABLE, "no usable ack",
                         natsStatus_GetText(pae->Err));
    }
}

void
obx_bus_on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
    struct obx_bus *bus = closure;
    size_t index;

    (void)js;
    pthread_mutex_lock(&bus->mu);
    if (obx_bus_ring_take_locked(bus, msg, &index)) {
        classify_locked(bus, &bus->slots[index], pa, pae);
        bus->last_progress_ms = obx_monotonic_ms();
        pthread_cond_signal(&bus->cond);
    }
    natsMsg_Destroy(msg);
    obx_bus_unref_unlock(bus);
}

void
obx_bus_slots_free(struct obx_bus *bus)
{
    for (size_t i = 0; i < bus->slots_cap; i++) {
        free(bus->slots[i].text);
    }
    free(bus->slots);
    bus->slots = NULL;
    bus->slots_cap = 0;
}
