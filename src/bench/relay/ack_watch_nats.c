/* SPDX-License-Identifier: MIT */
/*
 * ack_watch_nats.c - when each tagged message reached the stream: a
 * subscriber on the stream's subjects notes the arrival of every message
 * whose body starts with {"seq":N (the server routes a JetStream publish
 * to subscribers as it stores and acks it), so a bench can set arrivals
 * against its commit times.
 */
#include <nats/nats.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "support/nats_conn_nats.h"

#include "common/banned.h" /* last: poisons unsafe functions */

struct obx_bench_ack_watch {
    natsConnection *nc;
    natsSubscription *sub;
    pthread_mutex_t lock;
    long long slots;
    double *arrived_at; /* by seq; 0: not seen */
};

long long
obx_bench_body_seq(const char *body)
{
    const char *seq = body != NULL ? strstr(body, "\"seq\"") : NULL;

    return seq != NULL ? strtoll(seq + strcspn(seq, "0123456789"), NULL, 10) : -1;
}

static void
on_message(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
    struct obx_bench_ack_watch *w = closure;
    long long i = obx_bench_body_seq(natsMsg_GetData(msg));
    double now = obx_bench_now();

    (void)nc;
    (void)sub;
    if (i >= 0) {
        pthread_mutex_lock(&w->lock);
        if (i < w->slots && w->arrived_at[i] == 0) {
            w->arrived_at[i] = now;
        }
        pthread_mutex_unlock(&w->lock);
    }
    natsMsg_Destroy(msg);
}

struct obx_bench_ack_watch *
obx_bench_ack_watch_start(const char *url, const char *subjects, long long slots)
{
    struct obx_bench_ack_watch *w = calloc(1, sizeof(*w));
    outbox_error err = {0};

    if (w == NULL || (w->arrived_at = calloc((size_t)slots, sizeof(double))) == NULL) {
        fprintf(stderr, "outbox-bench: out of memory\n");
        exit(1);
    }
    w->slots = slots;
    pthread_mutex_init(&w->lock, NULL);
    /* Signs in and verifies the server as the bench's other connections (tool auth). */
    if (obx_nats_connect_once(url, "outbox-bench-watch", &w->nc, &err) != OUTBOX_OK ||
        natsConnection_Subscribe(&w->sub, w->nc, subjects, on_message, w) != NATS_OK ||
        natsSubscription_SetPendingLimits(w->sub, -1, -1) != NATS_OK) {
        fprintf(stderr, "outbox-bench: cannot subscribe to %s: %s\n", subjects, err.message);
        exit(1);
    }
    return w;
}

double
obx_bench_ack_watch_arrival(struct obx_bench_ack_watch *w, long long seq)
{
    double at;

    pthread_mutex_lock(&w->lock);
    at = seq >= 0 && seq < w->slots ? w->arrived_at[seq] : 0;
    pthread_mutex_unlock(&w->lock);
    return at;
}

void
obx_bench_ack_watch_stop(struct obx_bench_ack_watch *w)
{
    if (w == NULL) {
        return;
    }
    obx_nats_teardown(w->nc, NULL, w->sub);
    pthread_mutex_destroy(&w->lock);
    free(w->arrived_at);
    free(w);
}
