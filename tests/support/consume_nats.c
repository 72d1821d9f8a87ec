/* SPDX-License-Identifier: MIT */
/*
 * consume_nats.c - consumer state, republishing and advisories, straight
 * from the NATS server (see consume_nats.h). Each call opens and closes
 * its own connection, so nothing here shares state with the processes
 * under test.
 */
#include "consume_nats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <nats/nats.h>

#include "js_conn_nats.h"

#define NS_PER_S INT64_C(1000000000)

static int
fail(char *err, size_t cap, const char *doing, natsStatus s, jsErrCode code)
{
    snprintf(err, cap, "%s: %s (jetstream error %d)", doing, natsStatus_GetText(s), (int)code);
    return -1;
}

int
consume_nats_state_read(const char *nats_url, const char *stream, const char *consumer,
                        struct consume_nats_state *out, char *err, size_t cap)
{
    struct test_js_conn c;
    jsConsumerInfo *ci = NULL;
    jsErrCode code = 0;
    natsStatus s;

    if (test_js_open(&c, nats_url, err, cap) != 0) {
        return -1;
    }
    s = js_GetConsumerInfo(&ci, c.js, stream, consumer, NULL, &code);
    if (s != NATS_OK) {
        test_js_close(&c);
        return fail(err, cap, "consumer info", s, code);
    }
    memset(out, 0, sizeof(*out));
    out->num_pending = ci->NumPending;
    out->num_ack_pending = (uint64_t)ci->NumAckPending;
    out->num_redelivered = (uint64_t)ci->NumRedelivered;
    out->delivered_consumer_seq = ci->Delivered.Consumer;
    out->delivered_stream_seq = ci->Delivered.Stream;
    out->ack_floor_stream_seq = ci->AckFloor.Stream;
    out->ack_wait_ns = ci->Config->AckWait;
    out->max_deliver = ci->Config->MaxDeliver;
    out->max_ack_pending = ci->Config->MaxAckPending;
    out->created_ns = ci->Created;
    snprintf(out->description, sizeof(out->description), "%s",
             ci->Config->Description != NULL ? ci->Config->Description : "");
    jsConsumerInfo_Destroy(ci);
    test_js_close(&c);
    return 0;
}

/* The stream's max age (seconds) and last sequence; either pointer may be NULL. */
static int
stream_state(const char *nats_url, const char *stream, int64_t *max_age_s, uint64_t *last_seq,
             char *err, size_t cap)
{
    struct test_js_conn c;
    jsStreamInfo *si = NULL;
    jsErrCode code = 0;
    natsStatus s;

    if (test_js_open(&c, nats_url, err, cap) != 0) {
        return -1;
    }
    s = js_GetStreamInfo(&si, c.js, stream, NULL, &code);
    if (s != NATS_OK) {
        test_js_close(&c);
        return fail(err, cap, "stream info", s, code);
    }
    if (max_age_s != NULL) {
        *max_age_s = si->Config->MaxAge / NS_PER_S;
    }
    if (last_seq != NULL) {
        *last_seq = si->State.LastSeq;
    }
    jsStreamInfo_Destroy(si);
    test_js_close(&c);
    return 0;
}

int
consume_nats_stream_max_age(const char *nats_url, const char *stream, int64_t *seconds, char *err,
                            size_t cap)
{
    return stream_state(nats_url, stream, seconds, NULL, err, cap);
}

int
consume_nats_last_seq(const char *nats_url, const char *stream, uint64_t *out, char *err,
                      size_t cap)
{
    return stream_state(nats_url, stream, NULL, out, err, cap);
}

int
consume_nats_msg_id(const char *nats_url, const char *stream, uint64_t seq, char *id, size_t id_cap,
                    char *err, size_t cap)
{
    struct test_js_conn c;
    natsMsg *m = NULL;
    const char *value = NULL;
    jsErrCode code = 0;
    natsStatus s;

    if (test_js_open(&c, nats_url, err, cap) != 0) {
        return -1;
    }
    s = js_GetMsg(&m, c.js, stream, seq, NULL, &code);
    test_js_close(&c);
    if (s != NATS_OK) {
        return fail(err, cap, "getting a message", s, code);
    }
    if (natsMsgHeader_Get(m, "Nats-Msg-Id", &value) != NATS_OK) {
        value = "";
    }
    snprintf(id, id_cap, "%s", value);
    natsMsg_Destroy(m);
    return 0;
}

/*
 * Publishes message `seq` again under "<old id>:requeue:<round>", the form
 * outboxctl dead requeue uses (consumers refuse any other id than the
 * event's own); 0 when there was no such message.
 */
static natsStatus
republish_one(struct test_js_conn *c, const char *stream, uint64_t seq, unsigned round,
              int *published, jsErrCode *code)
{
    natsMsg *old = NULL;
    jsPubOptions po;
    const char *old_id = NULL;
    char new_id[128];
    natsStatus s = js_GetMsg(&old, c->js, stream, seq, NULL, code);

    *published = 0;
    if (s == NATS_NOT_FOUND) {
        return NATS_OK;
    }
    if (s != NATS_OK) {
        return s;
    }
    if (natsMsgHeader_Get(old, "Nats-Msg-Id", &old_id) != NATS_OK) {
        old_id = "none";
    }
    snprintf(new_id, sizeof(new_id), "%s:requeue:%u", old_id, round);
    jsPubOptions_Init(&po);
    po.MsgId = new_id;
    po.ExpectStream = stream;
    s = js_Publish(NULL, c->js, natsMsg_GetSubject(old), natsMsg_GetData(old),
                   natsMsg_GetDataLength(old), &po, code);
    *published = s == NATS_OK;
    natsMsg_Destroy(old);
    return s;
}

int
consume_nats_republish(const char *nats_url, const char *stream, uint64_t first_seq,
                       uint64_t last_seq, unsigned round, size_t *published, char *err, size_t cap)
{
    struct test_js_conn c;

    *published = 0;
    if (test_js_open(&c, nats_url, err, cap) != 0) {
        return -1;
    }
    for (uint64_t seq = first_seq; seq <= last_seq; seq++) {
        jsErrCode code = 0;
        int one = 0;
        natsStatus s = republish_one(&c, stream, seq, round, &one, &code);

        if (s != NATS_OK) {
            test_js_close(&c);
            return fail(err, cap, "republishing", s, code);
        }
        *published += (size_t)one;
    }
    test_js_close(&c);
    return 0;
}

int
consume_nats_create_consumer(const char *nats_url, const char *stream, const char *consumer,
                             const char *filter, int ack_wait_seconds, const char *description,
                             int max_ack_pending, char *err, size_t cap)
{
    struct test_js_conn c;
    jsConsumerConfig cc;
    jsErrCode code = 0;
    natsStatus s;

    if (test_js_open(&c, nats_url, err, cap) != 0) {
        return -1;
    }
    jsConsumerConfig_Init(&cc);
    cc.Durable = consumer;
    cc.Description = description;
    cc.AckPolicy = js_AckExplicit;
    cc.DeliverPolicy = js_DeliverAll;
    cc.AckWait = (int64_t)ack_wait_seconds * NS_PER_S;
    cc.FilterSubject = filter;
    cc.MaxAckPending = max_ack_pending;
    s = js_AddConsumer(NULL, c.js, stream, &cc, NULL, &code);
    test_js_close(&c);
    return s == NATS_OK ? 0 : fail(err, cap, "creating the consumer", s, code);
}

int
consume_nats_create_stream(const char *nats_url, const char *stream, const char *prefix,
                           int64_t max_age_seconds, char *err, size_t cap)
{
    struct test_js_conn c;
    char subject[256];
    const char *subjects[] = {subject};
    jsStreamConfig sc;
    jsErrCode code = 0;
    natsStatus s;

    if (test_js_open(&c, nats_url, err, cap) != 0) {
        return -1;
    }
    snprintf(subject, sizeof(subject), "%s.>", prefix);
    jsStreamConfig_Init(&sc);
    sc.Name = stream;
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    sc.Storage = js_FileStorage;
    sc.MaxAge = max_age_seconds * NS_PER_S;
    sc.Duplicates = 3600 * NS_PER_S;
    s = js_AddStream(NULL, c.js, &sc, NULL, &code);
    test_js_close(&c);
    return s == NATS_OK ? 0 : fail(err, cap, "creating the stream", s, code);
}

int
consume_nats_terms_watch(struct consume_nats_terms *w, const char *nats_url, const char *stream,
                         const char *consumer, char *err, size_t cap)
{
    natsConnection *nc = NULL;
    natsSubscription *sub = NULL;
    char subject[300];
    natsStatus s;

    memset(w, 0, sizeof(*w));
    snprintf(subject, sizeof(subject), "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.%s.%s", stream,
             consumer);
    s = natsConnection_ConnectTo(&nc, nats_url);
    if (s == NATS_OK) {
        s = natsConnection_SubscribeSync(&sub, nc, subject);
    }
    if (s == NATS_OK) {
        s = natsConnection_Flush(nc); /* subscribed before anything is terminated */
    }
    if (s != NATS_OK) {
        natsSubscription_Destroy(sub);
        natsConnection_Destroy(nc);
        snprintf(err, cap, "subscribing to %s: %s", subject, natsStatus_GetText(s));
        return -1;
    }
    w->nc = nc;
    w->sub = sub;
    return 0;
}

/* The advisory's stream_seq, or 0. */
static uint64_t
advisory_seq(natsMsg *m)
{
    json_t *doc = json_loadb(natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m), 0, NULL);
    uint64_t seq = (uint64_t)json_integer_value(json_object_get(doc, "stream_seq"));

    json_decref(doc);
    return seq;
}

int
consume_nats_terms_take(struct consume_nats_terms *w, int wait_ms, uint64_t *seqs, size_t cap_seqs)
{
    int got = 0;

    for (;;) {
        natsMsg *m = NULL;
        natsStatus s = natsSubscription_NextMsg(&m, w->sub, got == 0 && wait_ms > 1 ? wait_ms : 50);

        if (s == NATS_TIMEOUT) {
            return got;
        }
        if (s != NATS_OK) {
            return -1;
        }
        if ((size_t)got < cap_seqs) {
            seqs[got] = advisory_seq(m);
        }
        got++;
        natsMsg_Destroy(m);
    }
}

void
consume_nats_terms_close(struct consume_nats_terms *w)
{
    natsSubscription_Destroy(w->sub);
    natsConnection_Destroy(w->nc);
    memset(w, 0, sizeof(*w));
}
