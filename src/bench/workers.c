/* SPDX-License-Identifier: MIT */
/*
 * workers.c - relays and consumers as threads of the benchmark, each with
 * its own connections, exactly as separate processes would have them.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#include "banned.h" /* last: poisons unsafe functions */

static void *
worker_main(void *arg)
{
    struct obx_bench_worker *w = arg;
    outbox_error err;

    if (w->relay != NULL) {
        outbox_relay_run(w->relay, &err);
    } else {
        outbox_consumer_run(w->consumer, &err);
    }
    return NULL;
}

static struct obx_bench_worker *
next_slot(struct obx_bench_workers *ws)
{
    if (ws->count >= OBX_BENCH_MAX_WORKERS) {
        fprintf(stderr, "outbox-bench: at most %d workers\n", OBX_BENCH_MAX_WORKERS);
        exit(1);
    }
    return &ws->w[ws->count];
}

static void
start(struct obx_bench_workers *ws, struct obx_bench_worker *w)
{
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        fprintf(stderr, "outbox-bench: cannot start a worker thread\n");
        exit(1);
    }
    ws->count++;
}

void
obx_bench_relays_start(struct obx_bench_workers *ws, const outbox_relay_options *opts, int count)
{
    for (int i = 0; i < count; i++) {
        struct obx_bench_worker *w = next_slot(ws);
        outbox_relay_options o = *opts;
        outbox_error err;
        char name[32];

        snprintf(name, sizeof(name), "bench-relay-%d", ws->count);
        o.name = name;
        memset(w, 0, sizeof(*w));
        if (outbox_relay_new(&o, &w->relay, &err) != OUTBOX_OK) {
            fprintf(stderr, "outbox-bench: cannot start a relay: %s\n", err.message);
            exit(1);
        }
        start(ws, w);
    }
}

void
obx_bench_consumers_start(struct obx_bench_workers *ws, const outbox_consumer_options *opts,
                          int count, const char *handler_sql)
{
    for (int i = 0; i < count; i++) {
        struct obx_bench_worker *w = next_slot(ws);
        outbox_consumer_options o = *opts;
        outbox_error err;
        char name[32];

        snprintf(name, sizeof(name), "bench-consumer-%d", ws->count);
        o.name = name;
        memset(w, 0, sizeof(*w));
        if (outbox_consumer_new(&o, &w->consumer, &err) != OUTBOX_OK ||
            outbox_consumer_add_sql_handler(w->consumer, "bench_sql", NULL, handler_sql, &err) !=
                OUTBOX_OK) {
            fprintf(stderr, "outbox-bench: cannot start a consumer: %s\n", err.message);
            exit(1);
        }
        start(ws, w);
    }
}

void
obx_bench_workers_stop(struct obx_bench_workers *ws)
{
    for (int i = 0; i < ws->count; i++) {
        if (ws->w[i].relay != NULL) {
            outbox_relay_stop(ws->w[i].relay);
        } else {
            outbox_consumer_stop(ws->w[i].consumer);
        }
    }
    for (int i = 0; i < ws->count; i++) {
        pthread_join(ws->w[i].thread, NULL);
        outbox_relay_free(ws->w[i].relay);
        outbox_consumer_free(ws->w[i].consumer);
    }
    ws->count = 0;
}

void
obx_bench_relay_totals(struct obx_bench_workers *ws, outbox_relay_stats *sum)
{
    memset(sum, 0, sizeof(*sum));
    for (int i = 0; i < ws->count; i++) {
        outbox_relay_stats s;

        if (ws->w[i].relay == NULL) {
            continue;
        }
        outbox_relay_stats_get(ws->w[i].relay, &s);
        sum->leased += s.leased;
        sum->published += s.published;
        sum->duplicates += s.duplicates;
        sum->dead += s.dead;
        sum->invalid += s.invalid;
    }
}

void
obx_bench_consumer_totals(struct obx_bench_workers *ws, outbox_consumer_stats *sum)
{
    memset(sum, 0, sizeof(*sum));
    for (int i = 0; i < ws->count; i++) {
        outbox_consumer_stats s;

        if (ws->w[i].consumer == NULL) {
            continue;
        }
        outbox_consumer_stats_get(ws->w[i].consumer, &s);
        sum->fetched += s.fetched;
        sum->handled += s.handled;
        sum->failed += s.failed;
    }
}

struct obx_bench_run
obx_bench_run_until(struct obx_bench_workers *ws, long long target, obx_bench_progress_fn progress)
{
    struct obx_bench_run run = {0};
    double start = 0, deadline = obx_bench_now() + 300;
    long long started = 0;

    do {
        obx_bench_pace(obx_bench_now(), start > 0 ? 0.005 : 0.001);
        progress(ws, &started, &run.done);
        if (start == 0 && started > 0) {
            start = obx_bench_now();
        }
    } while (run.done < target && obx_bench_now() < deadline);
    run.seconds = start > 0 ? obx_bench_now() - start : 0;
    run.complete = run.done >= target;
    return run;
}
