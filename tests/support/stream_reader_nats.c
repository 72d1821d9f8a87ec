/* SPDX-License-Identifier: MIT */
/*
 * stream_reader_nats.c - reads a stream's Nats-Msg-Ids from sequence 1.
 *
 * An ordered consumer is ephemeral, acks nothing and redelivers nothing,
 * so reading changes no state the relay could see; the stream's message
 * count, taken first, says when everything was read.
 */
#include "stream_reader_nats.h"

#include <stdio.h>
#include <string.h>

#include <nats/nats.h>

enum { NEXT_MSG_TIMEOUT_MS = 5000 };

struct reader {
    natsConnection *nc;
    jsCtx *js;
    jsStreamInfo *info;
};

static void
reader_close(struct reader *r)
{
    jsStreamInfo_Destroy(r->info);
    jsCtx_Destroy(r->js);
    natsConnection_Destroy(r->nc);
    memset(r, 0, sizeof(*r));
}

static int
reader_open(struct reader *r, const char *nats_url, const char *stream, char *err, size_t cap)
{
    jsErrCode code = 0;
    natsStatus s;

    memset(r, 0, sizeof(*r));
    s = natsConnection_ConnectTo(&r->nc, nats_url);
    if (s == NATS_OK) {
        s = natsConnection_JetStream(&r->js, r->nc, NULL);
    }
    if (s == NATS_OK) {
        s = js_GetStreamInfo(&r->info, r->js, stream, NULL, &code);
    }
    if (s != NATS_OK) {
        snprintf(err, cap, "stream %s info: %s (jetstream error %d)", stream, natsStatus_GetText(s),
                 (int)code);
        reader_close(r);
        return -1;
    }
    return 0;
}

int64_t
stream_message_count(const char *nats_url, const char *stream, char *err, size_t cap)
{
    struct reader r;
    int64_t count;

    if (reader_open(&r, nats_url, stream, err, cap) != 0) {
        return -1;
    }
    count = (int64_t)r.info->State.Msgs;
    reader_close(&r);
    return count;
}

/* Reads `want` messages from the subscription into `ids`. */
static int
read_messages(natsSubscription *sub, uint64_t want, struct id_set *ids, char *err, size_t cap)
{
    for (uint64_t got = 0; got < want; got++) {
        natsMsg *m = NULL;
        const char *id = NULL;
        natsStatus s = natsSubscription_NextMsg(&m, sub, NEXT_MSG_TIMEOUT_MS);

        if (s != NATS_OK) {
            snprintf(err, cap, "message %llu of %llu: %s", (unsigned long long)got + 1,
                     (unsigned long long)want, natsStatus_GetText(s));
            return -1;
        }
        if (natsMsgHeader_Get(m, "Nats-Msg-Id", &id) != NATS_OK) {
            id = "";
        }
        if (id_set_add(ids, id) != 0) {
            natsMsg_Destroy(m);
            snprintf(err, cap, "out of memory after %llu ids", (unsigned long long)got);
            return -1;
        }
        natsMsg_Destroy(m);
    }
    return 0;
}

int
stream_read_ids(const char *nats_url, const char *stream, struct id_set *ids, char *err, size_t cap)
{
    struct reader r;
    natsSubscription *sub = NULL;
    jsSubOptions so;
    jsErrCode code = 0;
    natsStatus s;
    uint64_t want;
    int rc;

    if (reader_open(&r, nats_url, stream, err, cap) != 0) {
        return -1;
    }
    want = r.info->State.Msgs;
    if (want == 0) {
        reader_close(&r);
        return 0;
    }
    jsSubOptions_Init(&so);
    so.Stream = stream;
    so.Ordered = true;
    so.Config.DeliverPolicy = js_DeliverAll;
    s = js_SubscribeSync(&sub, r.js, r.info->Config->Subjects[0], NULL, &so, &code);
    if (s != NATS_OK) {
        snprintf(err, cap, "ordered consumer on %s: %s (jetstream error %d)", stream,
                 natsStatus_GetText(s), (int)code);
        reader_close(&r);
        return -1;
    }
    rc = read_messages(sub, want, ids, err, cap);
    natsSubscription_Unsubscribe(sub);
    natsSubscription_Destroy(sub);
    reader_close(&r);
    return rc;
}
