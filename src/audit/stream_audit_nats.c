/* SPDX-License-Identifier: MIT */
/*
 * stream_audit_nats.c - reads a whole stream back by Nats-Msg-Id.
 *
 * An ephemeral pull consumer with no acks, from sequence 1, fetched in
 * large batches until it has seen as many messages as the stream held
 * when the audit began.
 */
#include <nats/nats.h>
#include <stdio.h>

#include "stream_audit.h"
#include "support/nats_conn_nats.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { FETCH_BATCH = 1000, FETCH_WAIT_MS = 2000 };

static long long
message_count(jsCtx *js, const char *stream)
{
    jsStreamInfo *si = NULL;
    long long count = -1;

    if (js_GetStreamInfo(&si, js, stream, NULL, NULL) == NATS_OK) {
        count = (long long)si->State.Msgs;
    }
    jsStreamInfo_Destroy(si);
    return count;
}

/* Fetches until `want` messages were read or a fetch comes back empty. */
static long long
read_all(natsSubscription *sub, long long want, struct obx_id_set *ids)
{
    long long seen = 0;

    while (seen < want) {
        natsMsgList list = {0};
        natsStatus s = natsSubscription_Fetch(&list, sub, FETCH_BATCH, FETCH_WAIT_MS, NULL);

        if (s != NATS_OK || list.Count == 0) {
            natsMsgList_Destroy(&list);
            break;
        }
        for (int i = 0; i < list.Count; i++) {
            const char *id = NULL;

            if (natsMsgHeader_Get(list.Msgs[i], "Nats-Msg-Id", &id) == NATS_OK && id != NULL) {
                obx_id_set_add(ids, id);
            }
            seen++;
        }
        natsMsgList_Destroy(&list);
    }
    return seen;
}

int
obx_stream_audit(const char *nats_url, const char *stream, const char *subjects,
                 struct obx_id_set *ids, char *err, size_t err_len)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    natsSubscription *sub = NULL;
    jsSubOptions so;
    long long want = -1, seen = 0;
    outbox_error oe = {0};
    int rc = -1;

    jsSubOptions_Init(&so);
    so.Stream = stream;
    so.Config.AckPolicy = js_AckNone;
    so.Config.DeliverPolicy = js_DeliverAll;
    if (obx_nats_connect_once(nats_url, "outbox-audit", &nc, &oe) != OUTBOX_OK) {
        snprintf(err, err_len, "%s", oe.message);
    } else if (natsConnection_JetStream(&js, nc, NULL) != NATS_OK) {
        snprintf(err, err_len, "cannot connect to NATS");
    } else if ((want = message_count(js, stream)) < 0) {
        snprintf(err, err_len, "stream %s not found", stream);
    } else if (want > 0 && js_PullSubscribe(&sub, js, subjects, NULL, NULL, &so, NULL) != NATS_OK) {
        snprintf(err, err_len, "cannot read stream %s", stream);
    } else {
        seen = want > 0 ? read_all(sub, want, ids) : 0;
        rc = seen == want ? 0 : -1;
        if (rc != 0) {
            snprintf(err, err_len, "read %lld of %lld messages", seen, want);
        }
    }
    obx_nats_teardown(nc, js, sub);
    return rc;
}

long long
obx_stream_message_count(const char *nats_url, const char *stream)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    outbox_error oe = {0};
    long long count = -1;

    if (obx_nats_connect_once(nats_url, "outbox-audit", &nc, &oe) == OUTBOX_OK &&
        natsConnection_JetStream(&js, nc, NULL) == NATS_OK) {
        count = message_count(js, stream);
    }
    obx_nats_teardown(nc, js, NULL);
    return count;
}
