/* SPDX-License-Identifier: MIT */
/*
 * cluster_nats.c - leaders, replicas, stepdowns and per-node reads of a
 * JetStream cluster (see cluster_nats.h). Each call opens and closes its
 * own connection.
 *
 * A consumer reads the stream from the store of the server that leads it,
 * so an ephemeral consumer placed on node X reads X's copy. Where the
 * cluster places one is its choice; the reader checks the consumer's
 * leader and tries again (moving the stream's leadership, which ephemeral
 * consumers may follow) until it is X.
 */
#include "cluster_nats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nats/nats.h>

#include "js_conn_nats.h"

enum { NEXT_MSG_TIMEOUT_MS = 5000, API_TIMEOUT_MS = 5000, PLACE_TRIES = 24 };

static void
copy_name(char *out, const char *name)
{
    snprintf(out, CLUSTER_NAME_CAP, "%s", name != NULL ? name : "");
}

int
cluster_stream_view(const char *url, const char *stream, struct cluster_view *v, char *err,
                    size_t cap)
{
    struct test_js_conn c;
    jsStreamInfo *si = NULL;
    jsErrCode code = 0;
    natsStatus s;

    memset(v, 0, sizeof(*v));
    if (test_js_open(&c, url, err, cap) != 0) {
        return -1;
    }
    s = js_GetStreamInfo(&si, c.js, stream, NULL, &code);
    if (s != NATS_OK) {
        snprintf(err, cap, "stream %s info: %s (jetstream error %d)", stream, natsStatus_GetText(s),
                 (int)code);
        test_js_close(&c);
        return -1;
    }
    v->messages = si->State.Msgs;
    v->last_seq = si->State.LastSeq;
    if (si->Cluster != NULL) {
        copy_name(v->leader, si->Cluster->Leader);
        for (int i = 0; i < si->Cluster->ReplicasLen && v->replicas < CLUSTER_MAX_REPLICAS; i++) {
            jsPeerInfo *p = si->Cluster->Replicas[i];

            copy_name(v->replica[v->replicas].name, p->Name);
            v->replica[v->replicas].current = p->Current;
            v->replica[v->replicas].offline = p->Offline;
            v->replicas++;
        }
    }
    jsStreamInfo_Destroy(si);
    test_js_close(&c);
    return 0;
}

int
cluster_stream_current(const char *url, const char *stream, int replicas)
{
    struct cluster_view v;
    char err[256];
    size_t current = 0;

    if (cluster_stream_view(url, stream, &v, err, sizeof(err)) != 0 || v.leader[0] == '\0') {
        return 0;
    }
    for (size_t i = 0; i < v.replicas; i++) {
        current += v.replica[i].current && !v.replica[i].offline;
    }
    return current + 1 == (size_t)replicas;
}

int
cluster_consumer_leader(const char *url, const char *stream, const char *consumer, char *leader,
                        size_t leader_cap, char *err, size_t cap)
{
    struct test_js_conn c;
    jsConsumerInfo *ci = NULL;
    jsErrCode code = 0;
    natsStatus s;

    if (test_js_open(&c, url, err, cap) != 0) {
        return -1;
    }
    s = js_GetConsumerInfo(&ci, c.js, stream, consumer, NULL, &code);
    if (s != NATS_OK || ci->Cluster == NULL || ci->Cluster->Leader == NULL) {
        snprintf(err, cap, "consumer %s info: %s (jetstream error %d)", consumer,
                 s != NATS_OK ? natsStatus_GetText(s) : "no leader", (int)code);
        jsConsumerInfo_Destroy(ci);
        test_js_close(&c);
        return -1;
    }
    snprintf(leader, leader_cap, "%s", ci->Cluster->Leader);
    jsConsumerInfo_Destroy(ci);
    test_js_close(&c);
    return 0;
}

int
cluster_consumer_current(const char *url, const char *stream, const char *consumer, int replicas)
{
    struct test_js_conn c;
    jsConsumerInfo *ci = NULL;
    char err[256];
    int current = 0, ok;

    if (test_js_open(&c, url, err, sizeof(err)) != 0) {
        return 0;
    }
    ok = js_GetConsumerInfo(&ci, c.js, stream, consumer, NULL, NULL) == NATS_OK &&
         ci->Cluster != NULL && ci->Cluster->Leader != NULL && ci->Cluster->Leader[0] != '\0';
    for (int i = 0; ok && i < ci->Cluster->ReplicasLen; i++) {
        current += ci->Cluster->Replicas[i]->Current && !ci->Cluster->Replicas[i]->Offline;
    }
    jsConsumerInfo_Destroy(ci);
    test_js_close(&c);
    return ok && current + 1 == replicas;
}

static int
api_success(const char *url, const char *subject, char *err, size_t cap)
{
    struct test_js_conn c;
    natsMsg *reply = NULL;
    natsStatus s;
    int rc = -1;

    if (test_js_open(&c, url, err, cap) != 0) {
        return -1;
    }
    s = natsConnection_RequestString(&reply, c.nc, subject, "", API_TIMEOUT_MS);
    if (s != NATS_OK) {
        snprintf(err, cap, "%s: %s", subject, natsStatus_GetText(s));
    } else if (strstr(natsMsg_GetData(reply), "\"success\":true") == NULL) {
        snprintf(err, cap, "%s: %.200s", subject, natsMsg_GetData(reply));
    } else {
        rc = 0;
    }
    natsMsg_Destroy(reply);
    test_js_close(&c);
    return rc;
}

int
cluster_stream_stepdown(const char *url, const char *stream, char *err, size_t cap)
{
    char subject[256];

    snprintf(subject, sizeof(subject), "$JS.API.STREAM.LEADER.STEPDOWN.%s", stream);
    return api_success(url, subject, err, cap);
}

int
cluster_consumer_stepdown(const char *url, const char *stream, const char *consumer, char *err,
                          size_t cap)
{
    char subject[256];

    snprintf(subject, sizeof(subject), "$JS.API.CONSUMER.LEADER.STEPDOWN.%s.%s", stream, consumer);
    return api_success(url, subject, err, cap);
}

/* Reads `want` messages from `sub`; ids into `ids`, stored times into `times`. */
static int
read_messages(natsSubscription *sub, uint64_t want, struct id_set *ids, int64_t *times, char *err,
              size_t cap)
{
    for (uint64_t got = 0; got < want; got++) {
        natsMsg *m = NULL;
        jsMsgMetaData *meta = NULL;
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
        if (times != NULL) {
            times[got] = natsMsg_GetMetaData(&meta, m) == NATS_OK ? meta->Timestamp : 0;
            jsMsgMetaData_Destroy(meta);
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

/* An ordered consumer from sequence 1; its leader's name into `leader`. */
static natsStatus
subscribe(struct test_js_conn *c, const char *stream, const char *subject, natsSubscription **sub,
          char *leader)
{
    jsSubOptions so;
    jsConsumerInfo *ci = NULL;
    natsStatus s;

    jsSubOptions_Init(&so);
    so.Stream = stream;
    so.Ordered = true;
    so.Config.DeliverPolicy = js_DeliverAll;
    s = js_SubscribeSync(sub, c->js, subject, NULL, &so, NULL);
    if (s == NATS_OK) {
        s = natsSubscription_GetConsumerInfo(&ci, *sub, NULL, NULL);
    }
    copy_name(leader, s == NATS_OK && ci->Cluster != NULL ? ci->Cluster->Leader : "");
    jsConsumerInfo_Destroy(ci);
    return s;
}

int
cluster_read_on(const char *url, const char *stream, const char *node, struct id_set *ids,
                int64_t **stored_ns, char *err, size_t cap)
{
    struct cluster_view v;
    struct test_js_conn c;
    char subject[256], leader[CLUSTER_NAME_CAP];
    jsStreamInfo *si = NULL;
    int rc = -1;

    if (stored_ns != NULL) {
        *stored_ns = NULL;
    }
    if (cluster_stream_view(url, stream, &v, err, cap) != 0 ||
        test_js_open(&c, url, err, cap) != 0) {
        return -1;
    }
    if (js_GetStreamInfo(&si, c.js, stream, NULL, NULL) != NATS_OK) {
        snprintf(err, cap, "stream %s info failed", stream);
        test_js_close(&c);
        return -1;
    }
    snprintf(subject, sizeof(subject), "%s", si->Config->Subjects[0]);
    jsStreamInfo_Destroy(si);
    snprintf(err, cap, "no consumer of %s was placed on %s", stream, node);
    for (int attempt = 0; attempt < PLACE_TRIES; attempt++) {
        natsSubscription *sub = NULL;
        natsStatus s = subscribe(&c, stream, subject, &sub, leader);

        if (s == NATS_OK && strcmp(leader, node) == 0) {
            int64_t *times = v.messages > 0 ? calloc(v.messages, sizeof(*times)) : NULL;

            rc = read_messages(sub, v.messages, ids, times, err, cap);
            if (stored_ns != NULL && rc == 0) {
                *stored_ns = times;
            } else {
                free(times);
            }
            natsSubscription_Unsubscribe(sub);
            natsSubscription_Destroy(sub);
            break;
        }
        natsSubscription_Unsubscribe(sub);
        natsSubscription_Destroy(sub);
        /* Every third miss, move the stream's leadership: ephemerals may follow it. */
        if (attempt % 3 == 2) {
            char why[256];

            cluster_stream_stepdown(url, stream, why, sizeof(why));
            nats_Sleep(1500);
        }
    }
    test_js_close(&c);
    return rc;
}
