/* SPDX-License-Identifier: MIT */
/*
 * cluster_nats.h - what cluster tests ask a JetStream cluster itself: who
 * leads a stream or consumer, whether every replica is current, a leader
 * stepdown, and a stream read back from one chosen node's copy (with the
 * time the server stored each message). No Criterion here: every function
 * returns 0, or -1 with the reason in `err`. `url` may list every node.
 */
#ifndef OBX_TEST_CLUSTER_NATS_H
#define OBX_TEST_CLUSTER_NATS_H

#include <stddef.h>
#include <stdint.h>

#include "id_set.h"

enum { CLUSTER_NAME_CAP = 16, CLUSTER_MAX_REPLICAS = 4 };

struct cluster_view {
    char leader[CLUSTER_NAME_CAP]; /* "" while there is none */
    size_t replicas;               /* peers besides the leader */
    struct {
        char name[CLUSTER_NAME_CAP];
        int current; /* caught up with the leader */
        int offline;
    } replica[CLUSTER_MAX_REPLICAS];
    uint64_t messages;
    uint64_t last_seq;
};

int cluster_stream_view(const char *url, const char *stream, struct cluster_view *v, char *err,
                        size_t cap);

/* 1 if `stream` has a leader and `replicas` - 1 current, online followers. */
int cluster_stream_current(const char *url, const char *stream, int replicas);

/* The server name leading durable `consumer` of `stream`. */
int cluster_consumer_leader(const char *url, const char *stream, const char *consumer, char *leader,
                            size_t leader_cap, char *err, size_t cap);

/* 1 if durable `consumer` has a leader and `replicas` - 1 current, online followers. */
int cluster_consumer_current(const char *url, const char *stream, const char *consumer,
                             int replicas);

/* $JS.API.STREAM.LEADER.STEPDOWN.<stream>: the leader hands over at once. */
int cluster_stream_stepdown(const char *url, const char *stream, char *err, size_t cap);

/* $JS.API.CONSUMER.LEADER.STEPDOWN.<stream>.<consumer>. */
int cluster_consumer_stepdown(const char *url, const char *stream, const char *consumer, char *err,
                              size_t cap);

/*
 * Reads `stream` from sequence 1 out of node `node`'s copy ("n2"): an
 * ephemeral consumer is created until the cluster places it on that node,
 * the stream's leadership stepped down towards it when needed. Adds every
 * Nats-Msg-Id to `ids`; `stored_ns` (may be NULL) gets a malloc'd array of
 * the stored times, in stream order, one per id added.
 */
int cluster_read_on(const char *url, const char *stream, const char *node, struct id_set *ids,
                    int64_t **stored_ns, char *err, size_t cap);

#endif
