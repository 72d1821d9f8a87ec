/* SPDX-License-Identifier: MIT */
/*
 * feed_msgs_nats.c - the JetStream feed's messages: fetch a batch from the
 * pull consumer, report long work, settle, free.
 *
 * nats.c buffers what is published while it reconnects and sends it
 * later. Acks sent that way could land after the server redelivered the
 * message elsewhere, so nothing is sent while disconnected: the caller
 * gets OUTBOX_EUNAVAILABLE and the server redelivers after ack_wait.
 *
 * Acks are fire-and-forget except the batch's last ACK, which waits for
 * the server's confirmation (AckSync): the acks before it travelled the
 * same connection in order, so a confirmed last ack means the batch's
 * acks arrived, and a lost one is reported instead of found out later.
 */
#include "feed.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <nats/nats.h>

#include "common/error.h"
#include "feed_nats_int.h"
#include "support/nats_conn_nats.h"
#include "support/pause.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define CONFIRM_TIMEOUT_MS 5000
#define MAX_FETCH          10000

struct nats_batch {
    natsMsgList list;
};

/*
 * What the consumer's checks need of the headers, in one pass over them:
 * the first value of Nats-Msg-Id whatever its case (nats.c matches keys
 * exactly), and the size of the header block as sent, every value of
 * every key counted ("Key: value\r\n" each). No headers, or a block nats.c
 * cannot read: no id and 0 bytes, and the message is refused for its id.
 */
static void
read_headers(natsMsg *msg, const char **msg_id, size_t *bytes)
{
    const char **keys = NULL;
    int count = 0;

    *msg_id = NULL;
    *bytes = 0;
    if (natsMsgHeader_Keys(msg, &keys, &count) != NATS_OK) {
        return;
    }
    for (int i = 0; i < count; i++) {
        const char **values = NULL;
        int n = 0;

        if (natsMsgHeader_Values(msg, keys[i], &values, &n) != NATS_OK) {
            continue;
        }
        for (int k = 0; k < n; k++) {
            *bytes += strlen(keys[i]) + 2 + strlen(values[k]) + 2;
        }
        if (*msg_id == NULL && n > 0 && strcasecmp(keys[i], "Nats-Msg-Id") == 0) {
            *msg_id = values[0];
        }
        free((void *)values); /* the array only: the strings belong to the message */
    }
    free((void *)keys);
}

/* How often the server delivered it, and its stream sequence. */
static void
metadata_of(natsMsg *msg, struct obx_feed_msg *m)
{
    jsMsgMetaData *meta = NULL;

    m->deliveries = 1;
    if (natsMsg_GetMetaData(&meta, msg) == NATS_OK) {
        m->deliveries = meta->NumDelivered > 0 ? (long long)meta->NumDelivered : 1;
        m->stream_seq = (unsigned long long)meta->Sequence.Stream;
        jsMsgMetaData_Destroy(meta);
    }
}

/* Borrowed views of the messages; anything the publisher sent is passed on. */
void
obx_nats_feed_describe(natsMsg *msg, struct obx_feed_msg *m)
{
    const char *id = NULL;
    const char *data = natsMsg_GetData(msg);

    read_headers(msg, &id, &m->header_bytes);
    m->event_id = id != NULL ? id : "";
    m->subject = natsMsg_GetSubject(msg);
    m->envelope = data != NULL ? data : "";
    m->envelope_len = data != NULL ? (size_t)natsMsg_GetDataLength(msg) : 0;
    metadata_of(msg, m);
}

static outbox_status
fill(struct obx_nats_feed *f, natsMsgList *list, struct obx_feed_batch *out, outbox_error *err)
{
    struct nats_batch *b;
    struct obx_feed_msg *msgs;

    if (list->Count <= 0) {
        natsMsgList_Destroy(list);
        return OUTBOX_OK;
    }
    b = calloc(1, sizeof(*b));
    msgs = calloc((size_t)list->Count, sizeof(*msgs));
    if (b == NULL || msgs == NULL) {
        free(b);
        free(msgs);
        natsMsgList_Destroy(list); /* redelivered after ack_wait */
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory for a batch");
    }
    b->list = *list;
    for (int i = 0; i < list->Count; i++) {
        obx_nats_feed_describe(list->Msgs[i], &msgs[i]);
    }
    out->count = (size_t)list->Count;
    out->msgs = msgs;
    out->impl = b;
    f->live_batches++;
    return OUTBOX_OK;
}

/* Quiet for a while: is the consumer still there? If not, the next fetch creates it. */
static void
recheck_consumer(struct obx_nats_feed *f)
{
    outbox_error e = {0};
    int exists = 1;

    f->checked_ms = obx_monotonic_ms();
    if (obx_consumer_exists(f->nc, &f->spec, &exists, &e) == OUTBOX_OK && !exists) {
        f->ready = 0;
    }
}

outbox_status
obx_nats_feed_fetch(struct obx_feed *feed, size_t max, int timeout_ms, struct obx_feed_batch *out,
                    outbox_error *err)
{
    struct obx_nats_feed *f = feed->impl;
    natsMsgList list = {NULL, 0};
    jsErrCode code = 0;
    natsStatus ns;
    outbox_status st;

    obx_error_reset(err);
    memset(out, 0, sizeof(*out));
    st = obx_nats_feed_ready(f, err);
    if (st != OUTBOX_OK || max == 0) {
        return st;
    }
    ns = natsSubscription_Fetch(&list, f->sub, max > MAX_FETCH ? MAX_FETCH : (int)max,
                                timeout_ms > 0 ? timeout_ms : 1, &code);
    if (ns == NATS_TIMEOUT && obx_nats_feed_connected(f)) {
        if (obx_monotonic_ms() - f->checked_ms >= OBX_FEED_RECHECK_MS) {
            recheck_consumer(f);
        }
        return OUTBOX_OK; /* nothing to deliver */
    }
    if (ns != NATS_OK) {
        /* The consumer may be gone (deleted, or a server with an empty store): check again. */
        f->ready = 0;
        if (!obx_nats_feed_connected(f)) {
            return obx_fail(err, OUTBOX_EUNAVAILABLE, "nats connection lost during fetch");
        }
        return obx_nats_fail(err, ns, OUTBOX_EUNAVAILABLE, "fetching from the consumer");
    }
    f->checked_ms = obx_monotonic_ms(); /* messages came: the consumer is there */
    return fill(f, &list, out, err);
}

static natsMsg *
msg_at(struct obx_feed_batch *batch, size_t i)
{
    return ((struct nats_batch *)batch->impl)->list.Msgs[i];
}

outbox_status
obx_nats_feed_in_progress(struct obx_feed *feed, struct obx_feed_batch *batch, size_t i,
                          outbox_error *err)
{
    natsStatus ns;

    obx_error_reset(err);
    if (i >= batch->count) {
        return obx_fail(err, OUTBOX_EINVAL, "in_progress: message %zu of %zu", i, batch->count);
    }
    if (!obx_nats_feed_connected(feed->impl)) {
        return obx_fail(err, OUTBOX_EUNAVAILABLE, "nats is not connected");
    }
    ns = natsMsg_InProgress(msg_at(batch, i), NULL);
    return ns == NATS_OK ? OUTBOX_OK
                         : obx_nats_fail(err, ns, OUTBOX_EUNAVAILABLE, "sending in progress");
}

static natsStatus
settle_one(natsMsg *msg, enum obx_settle what, long long delay_ms)
{
    switch (what) {
    case OBX_SETTLE_NAK:
        return delay_ms > 0 ? natsMsg_NakWithDelay(msg, delay_ms, NULL) : natsMsg_Nak(msg, NULL);
    case OBX_SETTLE_TERM:
        return natsMsg_Term(msg, NULL);
    case OBX_SETTLE_ACK:
        break;
    }
    return natsMsg_Ack(msg, NULL);
}

/* Confirms that the batch's acks reached the server: AckSync on `last_ack`, else a flush. */
static natsStatus
confirm(struct obx_nats_feed *f, struct obx_feed_batch *batch, size_t last_ack)
{
    jsOptions jo;
    jsErrCode code = 0;

    if (last_ack == batch->count) {
        return natsConnection_FlushTimeout(f->nc, CONFIRM_TIMEOUT_MS);
    }
    jsOptions_Init(&jo);
    jo.Wait = CONFIRM_TIMEOUT_MS;
    return natsMsg_AckSync(msg_at(batch, last_ack), &jo, &code);
}

outbox_status
obx_nats_feed_settle(struct obx_feed *feed, struct obx_feed_batch *batch,
                     const enum obx_settle *what, const long long *delay_ms, outbox_error *err)
{
    struct obx_nats_feed *f = feed->impl;
    size_t last_ack = batch->count;
    natsStatus first = NATS_OK, ns;

    obx_error_reset(err);
    if (batch->count == 0) {
        return OUTBOX_OK;
    }
    if (what == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "settle: no outcome for %zu messages", batch->count);
    }
    if (!obx_nats_feed_connected(f)) {
        return obx_fail(err, OUTBOX_EUNAVAILABLE, "nats is not connected: redelivered later");
    }
    for (size_t i = 0; i < batch->count; i++) {
        last_ack = what[i] == OBX_SETTLE_ACK ? i : last_ack;
    }
    for (size_t i = 0; i < batch->count; i++) {
        if (i != last_ack) {
            ns = settle_one(msg_at(batch, i), what[i], delay_ms != NULL ? delay_ms[i] : 0);
            first = first == NATS_OK ? ns : first;
        }
    }
    ns = confirm(f, batch, last_ack);
    first = first == NATS_OK ? ns : first;
    return first == NATS_OK ? OUTBOX_OK
                            : obx_nats_fail(err, first, OUTBOX_EUNAVAILABLE, "settling the batch");
}

void
obx_nats_feed_batch_fini(struct obx_feed *feed, struct obx_feed_batch *batch)
{
    struct obx_nats_feed *f = feed->impl;
    struct nats_batch *b;

    if (batch == NULL) {
        return;
    }
    b = batch->impl;
    if (b != NULL) {
        natsMsgList_Destroy(&b->list);
        free(b);
        f->live_batches--;
    }
    free(batch->msgs);
    memset(batch, 0, sizeof(*batch));
}
