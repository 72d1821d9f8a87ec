/* SPDX-License-Identifier: MIT */
/*
 * sustained_pg.c - relays and busy writers sharing the machine: writers
 * commit 10,000 events/s (100 per transaction) for 30 s while two relays
 * publish. Reports the backlog when the writers stop, in seconds of
 * production, and how long the relays then take to drain it. Dead tuples
 * from leasing and finishing are what sink a PostgreSQL queue here.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "audit/stream_audit.h"
#include "bench/bench.h"
#include "outbox/worker.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { WRITERS = 4, RELAYS = 2, PER_TX = 100 };

struct writer {
    const struct obx_bench_env *env;
    double rate_per_s; /* this writer's share */
    double seconds;
    long long written;
    pthread_t thread;
};

static void *
writer_main(void *arg)
{
    struct writer *w = arg;
    PGconn *conn = obx_bench_connect(w->env);
    double start = obx_bench_now();

    for (long long tx = 0;; tx++) {
        double due = (double)(tx * PER_TX) / w->rate_per_s;

        if (due >= w->seconds) {
            break;
        }
        obx_bench_pace(start, due);
        obx_bench_write_batch(conn, PER_TX);
        w->written += PER_TX;
    }
    PQfinish(conn);
    return NULL;
}

static long long
backlog(PGconn *conn)
{
    return obx_bench_scalar(conn, "SELECT count(*) FROM outbox.events "
                                  "WHERE status IN ('pending', 'leased')");
}

static void
start_relays(const struct obx_bench_env *env, struct obx_bench_workers *ws)
{
    outbox_config *cfg = obx_bench_config(env, OUTBOX_CONFIG_RELAY);

    obx_bench_set(cfg, "stream", "BENCH_SUSTAINED");
    obx_bench_set(cfg, "subject_prefix", "benchsus");
    obx_bench_set_int(cfg, "batch_size", env->batch);
    obx_bench_relays_start(ws, cfg, RELAYS);
    outbox_config_free(cfg);
}

int
obx_bench_sustained(const struct obx_bench_env *env)
{
    const double rate = 10000, seconds = env->sustain_seconds;
    struct writer writers[WRITERS];
    struct obx_bench_workers relays = {0};
    PGconn *conn = obx_bench_connect(env);
    long long written = 0, at_end, left;
    double start, stop, drained;

    obx_bench_exec(conn, "TRUNCATE outbox.events");
    if (obx_bench_stream_create(env->nats_url, "BENCH_SUSTAINED", "benchsus") != 0) {
        return 1;
    }
    start_relays(env, &relays);
    start = obx_bench_now();
    for (int i = 0; i < WRITERS; i++) {
        writers[i] = (struct writer){.env = env, .rate_per_s = rate / WRITERS, .seconds = seconds};
        if (pthread_create(&writers[i].thread, NULL, writer_main, &writers[i]) != 0) {
            fprintf(stderr, "outbox-bench: cannot start writer thread %d\n", i);
            abort(); /* the relays and writers already running cannot be joined cleanly */
        }
    }
    for (int i = 0; i < WRITERS; i++) {
        pthread_join(writers[i].thread, NULL);
        written += writers[i].written;
    }
    stop = obx_bench_now();
    at_end = backlog(conn);
    for (left = at_end; left > 0 && obx_bench_now() - stop < 120;) {
        obx_bench_pace(obx_bench_now(), 0.02);
        left = backlog(conn);
    }
    drained = obx_bench_now() - stop;
    obx_bench_workers_stop(&relays);
    obx_bench_emit(
        json_pack("{s:s, s:s, s:f, s:f, s:i, s:i, s:i, s:I, s:f, s:I, s:f, s:f, s:I}", "bench",
                  "relay", "case", "sustained", "rate", rate, "seconds", seconds, "replicas",
                  RELAYS, "batch", env->batch, "writers", WRITERS, "written", (json_int_t)written,
                  "write_events_per_s", (double)written / (stop - start), "backlog_at_end",
                  (json_int_t)at_end, "backlog_seconds_of_production", (double)at_end / rate,
                  "drain_seconds", left == 0 ? drained : -1.0, "stream_msgs",
                  (json_int_t)obx_stream_message_count(env->nats_url, "BENCH_SUSTAINED")));
    obx_bench_stream_delete(env->nats_url, "BENCH_SUSTAINED");
    obx_bench_exec(conn, "TRUNCATE outbox.events");
    PQfinish(conn);
    return 0;
}
