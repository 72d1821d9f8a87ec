/* SPDX-License-Identifier: MIT */
/*
 * latency_nats.c - commit-to-ack latency at a fixed rate: one writer
 * commits one event per transaction on a schedule and notes when each
 * COMMIT returned; a subscriber on the stream's subjects notes when each
 * message arrived (the server routes a JetStream publish as it stores and
 * acks it). The payload carries the event's sequence number.
 */
#include <nats/nats.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "outbox/worker.h"

#include "support/nats_conn_nats.h"

#include "common/banned.h" /* last: poisons unsafe functions */

struct latency_run {
    long long count;
    double *commit_at;   /* by sequence number; written by the writer */
    double *received_at; /* by sequence number; written by the subscriber */
    pthread_mutex_t lock;
    long long received;
};

static void
on_message(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
    struct latency_run *run = closure;
    long long i = obx_bench_body_seq(natsMsg_GetData(msg));
    double now = obx_bench_now();

    (void)nc;
    (void)sub;
    if (i >= 0) {
        pthread_mutex_lock(&run->lock);
        if (i < run->count && run->received_at[i] == 0) {
            run->received_at[i] = now;
            run->received++;
        }
        pthread_mutex_unlock(&run->lock);
    }
    natsMsg_Destroy(msg);
}

static void
write_paced(PGconn *conn, struct latency_run *run, int rate_per_s)
{
    double start = obx_bench_now();
    char payload[128];
    outbox_error err;

    for (long long i = 0; i < run->count; i++) {
        outbox_event *ev = obx_bench_event();

        obx_bench_pace(start, (double)i / rate_per_s);
        snprintf(payload, sizeof(payload), "{\"seq\":%lld}", i);
        outbox_event_set_payload_json(ev, payload, strlen(payload), &err);
        obx_bench_exec(conn, "BEGIN");
        outbox_enqueue(conn, ev, &err);
        obx_bench_exec(conn, "COMMIT");
        run->commit_at[i] = obx_bench_now();
        outbox_event_free(ev);
    }
}

static void
percentiles(struct latency_run *run, double *p50, double *p99, long long *samples)
{
    double *ms = calloc((size_t)run->count, sizeof(*ms));
    long long n = 0;

    for (long long i = 0; i < run->count; i++) {
        if (run->received_at[i] > 0) {
            double d = (run->received_at[i] - run->commit_at[i]) * 1000.0;

            ms[n++] = d > 0 ? d : 0;
        }
    }
    *samples = n;
    *p50 = n ? obx_bench_median(ms, (int)n) : -1;
    *p99 = n ? ms[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] : -1; /* sorted by median() */
    free(ms);
}

int
obx_bench_relay_latency(const struct obx_bench_env *env, int rate_per_s, double seconds,
                        double *p50_ms, double *p99_ms, long long *samples)
{
    struct latency_run run = {.count = (long long)(rate_per_s * seconds)};
    natsConnection *nc = NULL;
    outbox_error err = {0};
    natsSubscription *sub = NULL;
    outbox_config *cfg = obx_bench_config(env, OUTBOX_CONFIG_RELAY);
    struct obx_bench_workers ws = {0};
    PGconn *conn = obx_bench_connect(env);
    double deadline;

    run.commit_at = calloc((size_t)run.count, sizeof(double));
    run.received_at = calloc((size_t)run.count, sizeof(double));
    pthread_mutex_init(&run.lock, NULL);
    obx_bench_exec(conn, "TRUNCATE outbox.events");
    if (obx_bench_stream_create(env->nats_url, "BENCH_LAT", "benchlat") != 0 ||
        obx_nats_connect_once(env->nats_url, "outbox-bench", &nc, &err) != OUTBOX_OK ||
        natsConnection_Subscribe(&sub, nc, "benchlat.>", on_message, &run) != NATS_OK) {
        fprintf(stderr, "outbox-bench: latency: cannot subscribe: %s\n", err.message);
        return -1;
    }
    obx_bench_set(cfg, "stream", "BENCH_LAT");
    obx_bench_set(cfg, "subject_prefix", "benchlat");
    obx_bench_set_int(cfg, "batch_size", env->batch);
    obx_bench_relays_start(&ws, cfg, 1);
    outbox_config_free(cfg);
    write_paced(conn, &run, rate_per_s);
    deadline = obx_bench_now() + 10;
    while (run.received < run.count && obx_bench_now() < deadline) {
        obx_bench_pace(obx_bench_now(), 0.01);
    }
    obx_bench_workers_stop(&ws);
    obx_nats_teardown(nc, NULL, sub);
    obx_bench_stream_delete(env->nats_url, "BENCH_LAT");
    percentiles(&run, p50_ms, p99_ms, samples);
    free(run.commit_at);
    free(run.received_at);
    obx_bench_close(conn);
    return 0;
}
