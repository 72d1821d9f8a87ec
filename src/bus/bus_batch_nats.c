/* SPDX-License-Identifier: MIT */
/*
 * bus_batch_nats.c - one batch at a time through the bus: JetStream async
 * publish with an ack per message, or core NATS publish + flush.
 *
 * A published message waits in the in-flight window (bus_window_nats.c)
 * for its ack. When collect() gives up on a batch it empties the window
 * and takes nats.c's pending list back, so a late ack finds nothing and
 * can never settle a row of the next batch. Only the window's messages are
 * held, never the whole batch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nats/nats.h>

#include "bus.h"
#include "bus_nats_int.h"
#include "common/error.h"
#include "common/text.h"
#include "envelope/cloudevents.h"
#include "envelope/subject.h"
#include "support/pause.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define MAX_HEADERS (OBX_CE_MAX_HEADERS + 2)

struct header {
    const char *key;
    const char *value;
};

/* Nats-Msg-Id, the CloudEvents attributes (shared with the http: handler), and the
 * aggregate's sequence in a header of our own for readers that do not speak CloudEvents. */
static size_t
headers_of(const struct obx_bus *bus, const struct obx_bus_message *m, struct header *h)
{
    struct obx_ce_attrs a = {.id = m->id,
                             .source = bus->ce_source,
                             .type = m->ce_type,
                             .time = m->ce_time,
                             .subject = m->ce_subject,
                             .traceparent = m->traceparent,
                             .sequence = m->sequence};
    struct obx_ce_header ce[OBX_CE_MAX_HEADERS];
    size_t n = 0, count = obx_ce_binary_headers(&a, ce);

    h[n++] = (struct header){"Nats-Msg-Id", m->msg_id != NULL ? m->msg_id : m->id};
    for (size_t i = 0; i < count; i++) {
        h[n++] = (struct header){ce[i].key, ce[i].value};
    }
    if (m->sequence != NULL) {
        h[n++] = (struct header){OBX_BUS_SEQUENCE_HEADER, m->sequence};
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
        obx_bus_slot_set(sl, OBX_PUBLISH_REJECTED, "message has no id", NULL);
        return 0;
    }
    if (m->subject == NULL || strlen(m->subject) > 255 || !obx_dotted_tokens_valid(m->subject)) {
        obx_bus_slot_set(sl, OBX_PUBLISH_REJECTED, "subject is not a valid nats subject", NULL);
        return 0;
    }
    if (m->body == NULL && m->body_len > 0) {
        obx_bus_slot_set(sl, OBX_PUBLISH_REJECTED, "message has no body", NULL);
        return 0;
    }
    n = headers_of(bus, m, h);
    for (size_t k = 0; k < n; k++) {
        if (obx_has_control(h[k].value)) {
            obx_bus_slot_set(sl, OBX_PUBLISH_REJECTED, "control byte in header", h[k].key);
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
    obx_bus_slot_textf(
        sl, OBX_PUBLISH_TOO_LARGE, "message exceeds max_payload",
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
    obx_bus_slot_set(sl, outcome, "publish failed", natsStatus_GetText(ns));
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
        obx_bus_wait_until_locked(bus, deadline);
    }
    room = bus->ring_used < bus->window && bus->lost_epoch == bus->batch_epoch;
    if (!room) {
        obx_bus_slot_set(sl, OBX_PUBLISH_UNAVAILABLE,
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
    obx_bus_ring_push_locked(bus, msg, i); /* before publishing: the ack can beat the return */
    sl->waiting = 1;
    bus->refs++;
    bus->last_progress_ms = obx_monotonic_ms();
    pthread_mutex_unlock(&bus->mu);
    bus->js_used = 1;
    ns = js_PublishMsgAsync(bus->js, &msg, &po);
    if (ns != NATS_OK && msg != NULL) {
        /* nats.c kept nothing and will not call obx_bus_on_ack() for it. */
        pthread_mutex_lock(&bus->mu);
        obx_bus_ring_take_locked(bus, msg, &index);
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
    obx_bus_slot_set(sl, OBX_PUBLISH_UNAVAILABLE, lost ? NOTE_LOST : NOTE_NOT_CONNECTED, NULL);
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
        obx_bus_slot_set(&bus->slots[i], OBX_PUBLISH_UNAVAILABLE, "not published", NULL);
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
        obx_bus_wait_until_locked(bus, deadline);
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
            obx_bus_slot_set(sl, OBX_PUBLISH_OK, NULL, NULL);
        } else if (lost) {
            obx_bus_slot_set(sl, OBX_PUBLISH_UNAVAILABLE, NOTE_LOST, NULL);
        } else {
            obx_bus_slot_set(sl, OBX_PUBLISH_UNAVAILABLE, "flush failed", natsStatus_GetText(ns));
        }
    }
}

static void
result_fill(struct obx_publish_result *r, struct slot *sl)
{
    r->outcome = (enum obx_publish_outcome)sl->outcome;
    r->duplicate = sl->duplicate;
    r->stream_seq = sl->outcome == OBX_PUBLISH_OK ? sl->seq : 0;
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
