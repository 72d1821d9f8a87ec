/* SPDX-License-Identifier: MIT */
/*
 * js_admin_nats.c - outboxctl's reads of JetStream (see js_admin.h).
 *
 * The connection is built like every other of ours (support/nats_conn_nats.c:
 * credentials, TLS, nothing printed); a CLI connects once and gives up at
 * once when NATS is down, so no reconnect matters here.
 */
#include "js_admin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nats/nats.h>

#include "common/error.h"
#include "support/nats_auth_nats.h"
#include "support/nats_conn_nats.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define NANOS_PER_MS     1000000LL
#define NANOS_PER_SECOND 1000000000LL
#define ERR_NO_STREAM    10059
#define ERR_NO_MESSAGE   10037
#define WALK_WAIT_MS     5000

struct obx_ctl_js {
    natsConnection *nc;
    jsCtx *js;
    natsSubscription *walked; /* freed only after the connection closes */
};

outbox_status
obx_ctl_js_open(const struct obx_config *cfg, struct obx_ctl_js **out, outbox_error *err)
{
    struct obx_nats_settings s = {
        .url = cfg->nats_url,
        .name = "outboxctl",
        .connect_timeout_ms = 2000,
        .write_timeout_ms = 5000,
    };
    struct obx_ctl_js *js = calloc(1, sizeof(*js));
    natsOptions *opts = NULL;
    char doing[300], redacted[256];
    struct obx_nats_hints hints;
    outbox_status st;
    natsStatus ns;

    if (js == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    obx_nats_auth_from_config(&s.auth, cfg);
    st = obx_nats_options_new(&s, &opts, err);
    if (st == OUTBOX_OK) {
        ns = natsConnection_Connect(&js->nc, opts);
        if (ns == NATS_OK) {
            ns = natsConnection_JetStream(&js->js, js->nc, NULL);
        }
        if (ns != NATS_OK) {
            obx_nats_redact(cfg->nats_url, redacted, sizeof(redacted));
            snprintf(doing, sizeof(doing), "connecting to nats at %s", redacted);
            obx_nats_hints_init(&hints, &s.auth, cfg->nats_url);
            st = obx_nats_fail_connect(err, ns, OUTBOX_EUNAVAILABLE, doing, &hints);
        }
    }
    natsOptions_Destroy(opts);
    if (st != OUTBOX_OK) {
        obx_ctl_js_close(js);
        return st;
    }
    *out = js;
    return OUTBOX_OK;
}

void
obx_ctl_js_close(struct obx_ctl_js *js)
{
    if (js != NULL) {
        obx_nats_teardown(js->nc, js->js, js->walked);
        free(js);
    }
}

size_t
obx_ctl_js_max_payload(struct obx_ctl_js *js)
{
    int64_t max = natsConnection_GetMaxPayload(js->nc);

    return max > 0 ? (size_t)max : 0;
}

static const char *
retention_name(jsRetentionPolicy r)
{
    return r == js_InterestPolicy ? "interest" : r == js_WorkQueuePolicy ? "workqueue" : "limits";
}

static void
copy_info(const jsStreamInfo *si, struct obx_ctl_stream *out)
{
    const jsStreamConfig *c = si->Config;
    size_t used = 0;

    out->exists = 1;
    out->messages = si->State.Msgs;
    out->bytes = si->State.Bytes;
    out->first_seq = si->State.FirstSeq;
    out->last_seq = si->State.LastSeq;
    out->created_unix_ms = si->Created / NANOS_PER_MS;
    out->first_unix_ms = si->State.Msgs > 0 ? si->State.FirstTime / NANOS_PER_MS : 0;
    out->max_age_seconds = c->MaxAge / NANOS_PER_SECOND;
    out->duplicate_window_seconds = c->Duplicates / NANOS_PER_SECOND;
    out->max_bytes = c->MaxBytes;
    out->max_msgs = c->MaxMsgs;
    out->replicas = c->Replicas;
    snprintf(out->retention, sizeof(out->retention), "%s", retention_name(c->Retention));
    snprintf(out->storage, sizeof(out->storage), "%s",
             c->Storage == js_MemoryStorage ? "memory" : "file");
    out->deny_delete = c->DenyDelete;
    out->deny_purge = c->DenyPurge;
    for (int i = 0; i < c->SubjectsLen && used < sizeof(out->subjects); i++) {
        used += (size_t)snprintf(out->subjects + used, sizeof(out->subjects) - used, "%s%s",
                                 i ? "," : "", c->Subjects[i]);
    }
}

/* Stream info with the options `o` (may be NULL); *si NULL when there is no such stream. */
static outbox_status
stream_info(struct obx_ctl_js *js, const char *name, jsOptions *o, jsStreamInfo **si,
            outbox_error *err)
{
    jsErrCode code = 0;
    natsStatus ns = js_GetStreamInfo(si, js->js, name, o, &code);

    if (ns == NATS_NOT_FOUND || code == ERR_NO_STREAM) {
        *si = NULL;
        return OUTBOX_OK;
    }
    if (ns != NATS_OK) {
        return obx_nats_fail(err, ns, OUTBOX_EUNAVAILABLE, "reading the stream's info");
    }
    return OUTBOX_OK;
}

outbox_status
obx_ctl_js_stream(struct obx_ctl_js *js, const char *name, struct obx_ctl_stream *out,
                  outbox_error *err)
{
    jsStreamInfo *si = NULL;
    outbox_status st = stream_info(js, name, NULL, &si, err);

    memset(out, 0, sizeof(*out));
    if (st == OUTBOX_OK && si != NULL) {
        copy_info(si, out);
    }
    jsStreamInfo_Destroy(si);
    return st;
}

outbox_status
obx_ctl_js_subject_counts(struct obx_ctl_js *js, const char *stream, json_t **out,
                          outbox_error *err)
{
    jsStreamInfo *si = NULL;
    json_t *counts = json_object();
    jsOptions o;
    outbox_status st;

    jsOptions_Init(&o);
    o.Stream.Info.SubjectsFilter = ">";
    st = counts != NULL ? stream_info(js, stream, &o, &si, err)
                        : obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    if (st == OUTBOX_OK && si != NULL && si->State.Subjects != NULL) {
        for (int i = 0; i < si->State.Subjects->Count; i++) {
            const jsStreamStateSubject *s = &si->State.Subjects->List[i];

            json_object_set_new(counts, s->Subject, json_integer((json_int_t)s->Msgs));
        }
    }
    jsStreamInfo_Destroy(si);
    if (st != OUTBOX_OK) {
        json_decref(counts);
        return st;
    }
    *out = counts;
    return OUTBOX_OK;
}

outbox_status
obx_ctl_js_consumers(struct obx_ctl_js *js, const char *stream, json_t **out, outbox_error *err)
{
    jsConsumerInfoList *list = NULL;
    jsErrCode code = 0;
    json_t *all;
    natsStatus ns = js_Consumers(&list, js->js, stream, NULL, &code);

    if (ns == NATS_NOT_FOUND) {
        *out = json_array();
        return *out != NULL ? OUTBOX_OK : obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    if (ns != NATS_OK) {
        return obx_nats_fail(err, ns, OUTBOX_EUNAVAILABLE, "listing the stream's consumers");
    }
    all = json_array();
    for (int i = 0; all != NULL && i < list->Count; i++) {
        const jsConsumerInfo *ci = list->List[i];
        const char *filter = ci->Config != NULL ? ci->Config->FilterSubject : NULL;

        if (ci->Config == NULL || ci->Config->Durable == NULL) {
            continue; /* ephemeral: someone's read, not a consumer group */
        }
        json_array_append_new(all, json_pack("{s:s, s:s?, s:I, s:I, s:I, s:I}", "name", ci->Name,
                                             "filter_subject", filter, "num_pending",
                                             (json_int_t)ci->NumPending, "num_ack_pending",
                                             (json_int_t)ci->NumAckPending, "num_redelivered",
                                             (json_int_t)ci->NumRedelivered, "ack_floor_stream_seq",
                                             (json_int_t)ci->AckFloor.Stream));
    }
    jsConsumerInfoList_Destroy(list);
    if (all == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    *out = all;
    return OUTBOX_OK;
}

static void
msg_id_of(natsMsg *m, char *out, size_t cap)
{
    const char *id = NULL;

    if (natsMsgHeader_Get(m, "Nats-Msg-Id", &id) != NATS_OK || id == NULL) {
        id = "";
    }
    snprintf(out, cap, "%s", id);
}

outbox_status
obx_ctl_js_message(struct obx_ctl_js *js, const char *stream, unsigned long long seq,
                   struct obx_ctl_js_msg *out, outbox_error *err)
{
    natsMsg *m = NULL;
    jsErrCode code = 0;
    natsStatus ns = js_GetMsg(&m, js->js, stream, (uint64_t)seq, NULL, &code);

    memset(out, 0, sizeof(*out));
    if (ns == NATS_NOT_FOUND || code == ERR_NO_MESSAGE || code == ERR_NO_STREAM) {
        return OUTBOX_OK;
    }
    if (ns != NATS_OK) {
        return obx_nats_fail(err, ns, OUTBOX_EUNAVAILABLE, "reading a message of the stream");
    }
    out->found = 1;
    msg_id_of(m, out->msg_id, sizeof(out->msg_id));
    snprintf(out->subject, sizeof(out->subject), "%s", natsMsg_GetSubject(m));
    out->unix_ms = natsMsg_GetTime(m) / NANOS_PER_MS;
    natsMsg_Destroy(m);
    return OUTBOX_OK;
}

/* Reads until the message at `last` (or a wait runs out); `*count` messages seen. */
static outbox_status
walk_messages(natsSubscription *sub, unsigned long long last, obx_ctl_js_each_fn each, void *ctx,
              unsigned long long *count, outbox_error *err)
{
    struct obx_ctl_js_seen seen = {0};

    while (seen.seq < last) {
        natsMsg *m = NULL;
        jsMsgMetaData *meta = NULL;
        char id[128];
        int stop;
        natsStatus ns = natsSubscription_NextMsg(&m, sub, WALK_WAIT_MS);

        if (ns == NATS_TIMEOUT && *count > 0) {
            break; /* the last messages reached max_age while we read */
        }
        if (ns != NATS_OK) {
            return obx_nats_fail(err, ns, OUTBOX_EUNAVAILABLE, "reading the stream");
        }
        if (natsMsg_GetMetaData(&meta, m) == NATS_OK) {
            seen.seq = meta->Sequence.Stream;
            seen.unix_ms = meta->Timestamp / NANOS_PER_MS;
            jsMsgMetaData_Destroy(meta);
        }
        msg_id_of(m, id, sizeof(id));
        (*count)++;
        seen.msg_id = id;
        seen.data = natsMsg_GetData(m);
        seen.len = (size_t)natsMsg_GetDataLength(m);
        stop = each(ctx, &seen);
        natsMsg_Destroy(m);
        if (stop) {
            break;
        }
    }
    return OUTBOX_OK;
}

outbox_status
obx_ctl_js_walk(struct obx_ctl_js *js, const char *stream, obx_ctl_js_each_fn each, void *ctx,
                unsigned long long *count, outbox_error *err)
{
    natsSubscription *sub = NULL;
    jsStreamInfo *si = NULL;
    jsErrCode code = 0;
    jsSubOptions so;
    natsStatus ns;
    outbox_status st = stream_info(js, stream, NULL, &si, err);

    *count = 0;
    if (st != OUTBOX_OK || si == NULL || si->State.Msgs == 0) {
        jsStreamInfo_Destroy(si);
        return st;
    }
    jsSubOptions_Init(&so);
    so.Stream = stream;
    so.Ordered = true;
    so.Config.DeliverPolicy = js_DeliverAll;
    ns =
        js_SubscribeSync(&sub, js->js, si->Config->SubjectsLen == 1 ? si->Config->Subjects[0] : ">",
                         NULL, &so, &code);
    if (ns != NATS_OK) {
        st = obx_nats_fail(err, ns, OUTBOX_EUNAVAILABLE, "reading the stream");
    } else {
        st = walk_messages(sub, si->State.LastSeq, each, ctx, count, err);
        natsSubscription_Unsubscribe(sub);
    }
    /* Kept until the connection closes: the reader may still hold it (see
     * obx_nats_teardown); an earlier walk's is long out of its hands. */
    natsSubscription_Destroy(js->walked);
    js->walked = sub;
    jsStreamInfo_Destroy(si);
    return st;
}

outbox_status
obx_ctl_js_account(struct obx_ctl_js *js, struct obx_ctl_js_account *out, outbox_error *err)
{
    jsAccountInfo *ai = NULL;
    jsErrCode code = 0;
    natsStatus ns = js_GetAccountInfo(&ai, js->js, NULL, &code);

    if (ns != NATS_OK) {
        return obx_nats_fail(err, ns, OUTBOX_EUNAVAILABLE, "reading the jetstream account");
    }
    out->storage_bytes = ai->Store;
    out->memory_bytes = ai->Memory;
    out->max_storage = ai->Limits.MaxStore;
    out->max_memory = ai->Limits.MaxMemory;
    out->streams = ai->Streams;
    jsAccountInfo_Destroy(ai);
    return OUTBOX_OK;
}
