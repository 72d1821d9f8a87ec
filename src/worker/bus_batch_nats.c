/* SPDX-License-Identifier: MIT */
/*
 * bus_batch_nats.c - one batch at a time through the bus: JetStream async
 * publish with an ack per message, or core NATS publish + flush.
 *
 * A published message sits in a ring (the in-flight window) until nats.c
 * hands its ack to obx_bus_on_ack() on one of its threads. When collect()
 * gives up on a batch it empties the ring and takes nats.c's pending list
 * back, so a late ack finds nothing and can never settle a row of the next
 * batch. Only the window's messages are held, never the whole batch.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nats/nats.h>

#include "bus.h"
#include "bus_nats_int.h"
#include "error.h"
#include "pause.h"
#include "subject.h"
#include "text.h"

#include "banned.h" /* last: poisons unsafe functions */

#define MAX_HEADERS 10
#define REASON_CAP  200 /* sizeof(obx_publish_result.reason) */

static void slot_textf(struct slot *sl, enum obx_publish_outcome outcome, const char *fallback,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void
wait_until_locked(struct obx_bus *bus, long long deadline_ms)
{
    struct timespec ts = {.tv_sec = deadline_ms / 1000, .tv_nsec = (deadline_ms % 1000) * 1000000};

    pthread_cond_timedwait(&bus->cond, &bus->mu, &ts);
}

/* ---- slots and the ring ---- */

static void
slot_set(struct slot *sl, enum obx_publish_outcome outcome, const char *note, const char *detail)
{
    sl->outcome = (unsigned char)outcome;
    sl->waiting = 0;
    sl->note = note;
    sl->detail = detail;
}

/* Like slot_set with a formatted reason; falls back to a static one without memory. */
static void
slot_textf(struct slot *sl, enum obx_publish_outcome outcome, const char *fallback, const char *fmt,
           ...)
{
    va_list ap;

    slot_set(sl, outcome, fallback, NULL);
    free(sl->text);
    sl->text = malloc(REASON_CAP);
    if (sl->text != NULL) {
        va_start(ap, fmt);
        vsnprintf(sl->text, REASON_CAP, fmt, ap);
        va_end(ap);
    }
}

static void
ring_push_locked(struct obx_bus *bus, natsMsg *msg, size_t index)
{
    struct ring_entry *e = &bus->ring[(bus->ring_head + bus->ring_used) % bus->window];

    e->msg = msg;
    e->index = index;
    bus->ring_used++;
    bus->ring_live++;
}

/* Acks come back in publish order, so the scan usually stops at the head. */
static int
ring_take_locked(struct obx_bus *bus, const natsMsg *msg, size_t *index)
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
            slot_set(&bus->slots[e->index], OBX_PUBLISH_UNAVAILABLE, note, NULL);
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
        slot_set(sl, OBX_PUBLISH_OK, NULL, NULL);
        sl->duplicate = pa->Duplicate ? 1 : 0;
    } else if (pa != NULL) {
        slot_textf(sl, OBX_PUBLISH_UNAVAILABLE, "acked by another stream",
                   "acked by stream %s, expected %s", pa->Stream ? pa->Stream : "?", bus->stream);
    } else if (pae == NULL) {
        slot_set(sl, OBX_PUBLISH_UNAVAILABLE, "empty ack", NULL);
    } else if (pae->Err == NATS_ERR && pae->ErrCode != 0 && !js_code_is_transport(pae->ErrCode)) {
        slot_textf(sl, OBX_PUBLISH_REJECTED, "jetstream refused the message",
                   "jetstream refused the message: %s (err_code=%d)",
                   pae->ErrText ? pae->ErrText : "", (int)pae->ErrCode);
    } else if (pae->ErrCode != 0) {
        slot_textf(sl, OBX_PUBLISH_UNAVAILABLE, "jetstream cannot store messages now",
                   "jetstream cannot store messages now: %s (err_code=%d)",
                   pae->ErrText ? pae->ErrText : "", (int)pae->ErrCode);
    } else if (pae->Err == NATS_NO_RESPONDERS) {
        slot_set(sl, OBX_PUBLISH_UNAVAILABLE,
                 "no responders: no stream captures the subject, or jetstream is down", NULL);
    } else {
        slot_set(sl, OBX_PUBLISH_UNAVAILABLE, "no usable ack", natsStatus_GetText(pae->Err));
    }
}

void
obx_bus_on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
    struct obx_bus *bus = closure;
    size_t index;

    (void)js;
    pthread_mutex_lock(&bus->mu);
    if (ring_take_locked(bus, msg, &index)) {
        classify_locked(bus, &bus->slots[index], pa, pae);
        bus->last_progress_ms = obx_monotonic_ms();
        pthread_cond_signal(&bus->cond);
    }
    natsMsg_Destroy(msg);
    obx_bus_unref_unlock(bus);
}

/* ---- messages ---- */

struct header {
    const char *key;
    const char *value;
};

static size_t
headers_of(const struct obx_bus *bus, const struct obx_bus_message *m, struct header *h)
{
    size_t n = 0;

    h[n++] = (struct header){"Nats-Msg-Id", m->id};
    h[n++] = (struct header){"Content-Type", "application/json"};
    h[n++] = (struct header){"ce-specversion", "1.0"};
    h[n++] = (struct header){"ce-id", m->id};
    if (m->ce_type != NULL) {
        h[n++] = (struct header){"ce-type", m->ce_type};
    }
    h[n++] = (struct header){"ce-source", bus->ce_source};
    if (m->ce_time != NULL) {
        h[n++] = (struct header){"ce-time", m->ce_time};
    }
    if (m->ce_subject != NULL) {
        h[n++] = (struct header){"ce-subject", m->ce_subject};
    }
    if (m->traceparent != NULL) {
        h[n++] = (struct header){"traceparent", m->traceparent};
    }
    return n;
}

/* Bytes of the encoded header block: "NATS/1.0\r\n", "Key: value\r\n" each, "\r\n". */
static size_t
header_bytes(const struct obx_bus *bus, const struct obx_bus_message *m)
{
    struct header h[MAX_HEADERS];
    size_t n = headers_of(bus, m, h);
    size_t bytes = 10 + 2;

    for (size_t k = 0; k < n; k++) {
        bytes += strlen(h[k].key) + 2 + strlen(h[k].value) + 2;
    }
    if (bus->kind == OBX_BUS_JETSTREAM) {
        bytes += strlen("Nats-Expected-Stream") + 2 + strlen(bus->stream) + 2;
    }
    return bytes;
}

/* Input the relay should never pass; checked here too because it would corrupt the protocol. */
static int
message_valid(const struct obx_bus *bus, const struct obx_bus_message *m, struct slot *sl)
{
    struct header h[MAX_HEADERS];
    size_t n;

    if (m->id == NULL || m->id[0] == '\0') {
        slot_set(sl, OBX_PUBLISH_REJECTED, "message has no id", NULL);
        return 0;
    }
    if (m->subject == NULL || strlen(m->subject) > 255 || !obx_dotted_tokens_valid(m->subject)) {
        slot_set(sl, OBX_PUBLISH_REJECTED, "subject is not a valid nats subject", NULL);
        return 0;
    }
    if (m->body == NULL && m->body_len > 0) {
        slot_set(sl, OBX_PUBLISH_REJECTED, "message has no body", NULL);
        return 0;
    }
    n = headers_of(bus, m, h);
    for (size_t k = 0; k < n; k++) {
        if (obx_has_control(h[k].value)) {
            slot_set(sl, OBX_PUBLISH_REJECTED, "control byte in header", h[k].key);
            return 0;
        }
    }
    return 1;
}

/* The body within the limit every body is judged by, and the whole message within max_payload. */
static int
message_fits(const struct obx_bus *bus, const struct obx_bus_message *m, struct slot *sl)
{
    size_t headers = header_bytes(bus, m);

    if (m->body_len <= obx_bus_body_limit(bus->max_payload_bytes) &&
        m->body_len + headers <= bus->max_payload_bytes) {
        return 1;
    }
    slot_textf(sl, OBX_PUBLISH_TOO_LARGE, "message exceeds max_payload",
               "message of %zu bytes plus %zu header bytes exceeds the server's max_payload of %zu "
               "bytes",
               m->body_len, headers, bus->max_payload_bytes);
    return 0;
}

static natsStatus
msg_build(const struct obx_bus *bus, const struct obx_bus_message *m, natsMsg **out)
{
    struct header h[MAX_HEADERS];
    size_t n = headers_of(bus, m, h);
    natsMsg *msg = NULL;
    natsStatus ns = natsMsg_Create(&msg, m->subject, NULL, m->body, (int)m->body_len);

    for (size_t k = 0; ns == NATS_OK && k < n; k++) {
        ns = natsMsgHeader_Set(msg, h[k].key, h[k].value);
    }
    if (ns != NATS_OK) {
        natsMsg_Destroy(msg);
        return ns;
    }
    *out = msg;
    return NATS_OK;
}

/* The outcome for a message nats.c refused to take. */
static void
slot_publish_failed(struct slot *sl, natsStatus ns)
{
    enum obx_publish_outcome outcome = OBX_PUBLISH_UNAVAILABLE;

    if (ns == NATS_MAX_PAYLOAD) {
        outcome = OBX_PUBLISH_TOO_LARGE;
    } else if (ns == NATS_INVALID_SUBJECT || ns == NATS_INVALID_ARG) {
        outcome = OBX_PUBLISH_REJECTED;
    }
    slot_set(sl, outcome, "publish failed", natsStatus_GetText(ns));
}

/* ---- send and collect ---- */

/* Waits while the window is full; false (and the slot decided) when no room will come. */
static int
wait_for_room(struct obx_bus *bus, struct slot *sl)
{
    int room;

    pthread_mutex_lock(&bus->mu);
    while (bus->ring_used == bus->window && bus->lost_epoch == bus->batch_epoch) {
        long long deadline = bus->last_progress_ms + bus->publish_timeout_ms;

        if (obx_monotonic_ms() >= deadline) {
            break;
        }
        wait_until_locked(bus, deadline);
    }
    room = bus->ring_used < bus->window && bus->lost_epoch == bus->batch_epoch;
    if (!room) {
        slot_set(sl, OBX_PUBLISH_UNAVAILABLE,
                 bus->lost_epoch != bus->batch_epoch ? NOTE_LOST : NOTE_NO_ACK, NULL);
    }
    pthread_mutex_unlock(&bus->mu);
    return room;
}

static void
publish_js(struct obx_bus *bus, const struct obx_bus_message *m, size_t i)
{
    struct slot *sl = &bus->slots[i];
    natsMsg *msg = NULL;
    jsPubOptions po;
    natsStatus ns;
    size_t index;

    if (!wait_for_room(bus, sl)) {
        return;
    }
    ns = msg_build(bus, m, &msg);
    if (ns != NATS_OK) {
        slot_publish_failed(sl, ns);
        return;
    }
    jsPubOptions_Init(&po);
    po.ExpectStream = bus->stream; /* an ack from any other stream is an error, never OK */
    pthread_mutex_lock(&bus->mu);
    ring_push_locked(bus, msg, i); /* before publishing: the ack can beat the return */
    sl->waiting = 1;
    bus->refs++;
    bus->last_progress_ms = obx_monotonic_ms();
    pthread_mutex_unlock(&bus->mu);
    bus->js_used = 1;
    ns = js_PublishMsgAsync(bus->js, &msg, &po);
    if (ns != NATS_OK && msg != NULL) {
        /* nats.c kept nothing and will not call obx_bus_on_ack() for it. */
        pthread_mutex_lock(&bus->mu);
        ring_take_locked(bus, msg, &index);
        bus->refs--;
        slot_publish_failed(sl, ns);
        pthread_mutex_unlock(&bus->mu);
        natsMsg_Destroy(msg);
    }
}

static void
publish_core(struct obx_bus *bus, const struct obx_bus_message *m, size_t i)
{
    natsMsg *msg = NULL;
    natsStatus ns = msg_build(bus, m, &msg);

    if (ns == NATS_OK) {
        ns = natsConnection_PublishMsg(bus->nc, msg);
        natsMsg_Destroy(msg);
    }
    if (ns != NATS_OK) {
        slot_publish_failed(&bus->slots[i], ns);
        return;
    }
    bus->slots[i].waiting = 1;
}

/* Publishing while reconnecting would fill nats.c's reconnect buffer: fail fast instead. */
static int
bus_usable(struct obx_bus *bus, struct slot *sl)
{
    int lost;

    pthread_mutex_lock(&bus->mu);
    lost = bus->lost_epoch != bus->batch_epoch;
    pthread_mutex_unlock(&bus->mu);
    if (!lost && obx_bus_connected_now(bus)) {
        return 1;
    }
    slot_set(sl, OBX_PUBLISH_UNAVAILABLE, lost ? NOTE_LOST : NOTE_NOT_CONNECTED, NULL);
    return 0;
}

static outbox_status
slots_reserve(struct obx_bus *bus, size_t count, outbox_error *err)
{
    if (count > bus->slots_cap) {
        struct slot *grown = realloc(bus->slots, count * sizeof(*grown));

        if (grown == NULL) {
            return obx_fail(err, OUTBOX_ENOMEM, "out of memory for a batch of %zu", count);
        }
        memset(grown + bus->slots_cap, 0, (count - bus->slots_cap) * sizeof(*grown));
        bus->slots = grown;
        bus->slots_cap = count;
    }
    for (size_t i = 0; i < count; i++) {
        free(bus->slots[i].text);
        memset(&bus->slots[i], 0, sizeof(bus->slots[i]));
        slot_set(&bus->slots[i], OBX_PUBLISH_UNAVAILABLE, "not published", NULL);
    }
    return OUTBOX_OK;
}

outbox_status
obx_bus_send(struct obx_bus *bus, const struct obx_bus_message *msgs, size_t count,
             outbox_error *err)
{
    outbox_status st;

    if (bus->batch_open) {
        return obx_fail(err, OUTBOX_EINVAL, "a batch is already in flight: collect it first");
    }
    st = slots_reserve(bus, count, err);
    if (st != OUTBOX_OK) {
        return st;
    }
    obx_bus_reopen_if_closed(bus);
    (void)obx_bus_max_payload(bus);
    pthread_mutex_lock(&bus->mu);
    bus->batch_epoch = bus->lost_epoch;
    bus->last_progress_ms = obx_monotonic_ms();
    pthread_mutex_unlock(&bus->mu);
    bus->batch_open = 1;
    bus->batch_count = count;
    for (size_t i = 0; i < count; i++) {
        struct slot *sl = &bus->slots[i];

        if (!message_valid(bus, &msgs[i], sl) || !message_fits(bus, &msgs[i], sl) ||
            !bus_usable(bus, sl)) {
            continue;
        }
        if (bus->kind == OBX_BUS_JETSTREAM) {
            publish_js(bus, &msgs[i], i);
        } else {
            publish_core(bus, &msgs[i], i);
        }
    }
    return OUTBOX_OK;
}

static void
collect_js(struct obx_bus *bus)
{
    pthread_mutex_lock(&bus->mu);
    while (bus->ring_live > 0 && bus->lost_epoch == bus->batch_epoch) {
        long long deadline = bus->last_progress_ms + bus->publish_timeout_ms;

        if (obx_monotonic_ms() >= deadline) {
            break;
        }
        wait_until_locked(bus, deadline);
    }
    obx_bus_ring_abandon_locked(bus, bus->lost_epoch != bus->batch_epoch ? NOTE_LOST : NOTE_NO_ACK);
    pthread_mutex_unlock(&bus->mu);
    obx_bus_reclaim_pending(bus);
}

/* Core NATS: done once the server has everything, which a flush (PING/PONG) proves. */
static void
collect_core(struct obx_bus *bus)
{
    natsStatus ns = NATS_CONNECTION_CLOSED;
    int lost, any = 0;

    for (size_t i = 0; i < bus->batch_count && !any; i++) {
        any = bus->slots[i].waiting;
    }
    if (!any) {
        return;
    }
    if (bus->nc != NULL) {
        ns = natsConnection_FlushTimeout(bus->nc, bus->publish_timeout_ms);
    }
    pthread_mutex_lock(&bus->mu);
    lost = bus->lost_epoch != bus->batch_epoch;
    pthread_mutex_unlock(&bus->mu);
    for (size_t i = 0; i < bus->batch_count; i++) {
        struct slot *sl = &bus->slots[i];

        if (!sl->waiting) {
            continue;
        }
        if (ns == NATS_OK && !lost) {
            slot_set(sl, OBX_PUBLISH_OK, NULL, NULL);
        } else if (lost) {
            slot_set(sl, OBX_PUBLISH_UNAVAILABLE, NOTE_LOST, NULL);
        } else {
            slot_set(sl, OBX_PUBLISH_UNAVAILABLE, "flush failed", natsStatus_GetText(ns));
        }
    }
}

static void
result_fill(struct obx_publish_result *r, struct slot *sl)
{
    r->outcome = (enum obx_publish_outcome)sl->outcome;
    r->duplicate = sl->duplicate;
    if (sl->text != NULL) {
        snprintf(r->reason, sizeof(r->reason), "%s", sl->text);
    } else {
        snprintf(r->reason, sizeof(r->reason), "%s%s%s", sl->note ? sl->note : "",
                 sl->detail ? ": " : "", sl->detail ? sl->detail : "");
    }
    free(sl->text);
    sl->text = NULL;
}

outbox_status
obx_bus_collect(struct obx_bus *bus, struct obx_publish_result *results, size_t count,
                outbox_error *err)
{
    if (!bus->batch_open) {
        return obx_fail(err, OUTBOX_EINVAL, "no batch in flight: send one first");
    }
    if (count != bus->batch_count) {
        return obx_fail(err, OUTBOX_EINVAL, "collect count %zu differs from the %zu messages sent",
                        count, bus->batch_count);
    }
    if (bus->kind == OBX_BUS_JETSTREAM) {
        collect_js(bus);
    } else {
        collect_core(bus);
    }
    for (size_t i = 0; i < count; i++) {
        result_fill(&results[i], &bus->slots[i]);
    }
    bus->batch_open = 0;
    return OUTBOX_OK;
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
