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
#include "config/config.h"
#include "consume/handler.h"
#include "relay/relay_claim_switch.h"
#include "support/nats_auth.h"

#include "common/banned.h" /* last: poisons unsafe functions */

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

outbox_config *
obx_bench_config(const struct obx_bench_env *env, outbox_config_kind kind)
{
    outbox_config *cfg = outbox_config_new(kind);
    outbox_error err;

    if (cfg == NULL) {
        fprintf(stderr, "outbox-bench: out of memory\n");
        exit(1);
    }
    obx_bench_set(cfg, "database_url", env->database_url);
    if (env->nats_url != NULL) {
        obx_bench_set(cfg, "nats_url", env->nats_url);
    }
    /* The workers sign in and verify the server as the bench's own connections do. */
    if (obx_nats_auth_load_env(&cfg->values, &err) != OUTBOX_OK) {
        fprintf(stderr, "outbox-bench: %s\n", err.message);
        exit(2);
    }
    return cfg;
}

void
obx_bench_set(outbox_config *cfg, const char *key, const char *value)
{
    outbox_error err;

    if (outbox_config_set(cfg, key, value, &err) != OUTBOX_OK) {
        fprintf(stderr, "outbox-bench: %s\n", err.message);
        exit(1);
    }
}

void
obx_bench_set_int(outbox_config *cfg, const char *key, long long value)
{
    char text[32];

    snprintf(text, sizeof(text), "%lld", value);
    obx_bench_set(cfg, key, text);
}

/* `cfg` with the next worker's own name, as separate processes would have it. */
static outbox_config *
named_copy(const outbox_config *cfg, const char *role, int index)
{
    outbox_config *copy = outbox_config_new(
        cfg->values.parts == OBX_FOR_RELAY ? OUTBOX_CONFIG_RELAY : OUTBOX_CONFIG_CONSUMER);
    char name[48];

    if (copy == NULL || obx_config_copy(&copy->values, &cfg->values, NULL) != OUTBOX_OK) {
        fprintf(stderr, "outbox-bench: out of memory\n");
        exit(1);
    }
    snprintf(name, sizeof(name), "bench-%s-%d", role, index);
    obx_bench_set(copy, "name", name);
    return copy;
}

void
obx_bench_relays_start(struct obx_bench_workers *ws, const outbox_config *cfg, int count)
{
    for (int i = 0; i < count; i++) {
        struct obx_bench_worker *w = next_slot(ws);
        outbox_config *own = named_copy(cfg, "relay", ws->count);
        outbox_error err;

        memset(w, 0, sizeof(*w));
        if (outbox_relay_new(own, &w->relay, &err) != OUTBOX_OK) {
            fprintf(stderr, "outbox-bench: cannot start a relay: %s\n", err.message);
            exit(1);
        }
        obx_relay_use_two_writes(w->relay, ws->two_writes);
        /* the two-write claim runs on its release's table, without this release's indexes */
        obx_relay_skip_upkeep(w->relay, ws->two_writes);
        outbox_config_free(own);
        start(ws, w);
    }
}

void
obx_bench_consumers_start(struct obx_bench_workers *ws, const outbox_config *cfg, int count,
                          const struct obx_bench_handler *handler)
{
    for (int i = 0; i < count; i++) {
        struct obx_bench_worker *w = next_slot(ws);
        outbox_config *own = named_copy(cfg, "consumer", ws->count);
        outbox_error err;

        memset(w, 0, sizeof(*w));
        if (outbox_consumer_new(own, &w->consumer, &err) != OUTBOX_OK ||
            (handler->sql != NULL ? outbox_consumer_add_sql_handler(w->consumer, "bench_sql", NULL,
                                                                    handler->sql, &err)
             : handler->ops != NULL
                 ? obx_consumer_add_external(w->consumer, "bench_ext", NULL, handler->ops,
                                             handler->ctx_each != NULL ? handler->ctx_each[i]
                                                                       : handler->ctx,
                                             handler->in_flight, &err)
                 : outbox_consumer_add_ext_handler(w->consumer, "bench_ext", NULL, handler->ext,
                                                   handler->ctx, &err)) != OUTBOX_OK) {
            fprintf(stderr, "outbox-bench: cannot start a consumer: %s\n", err.message);
            exit(1);
        }
        outbox_config_free(own);
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

unsigned long long
obx_bench_total(struct obx_bench_workers *ws, enum obx_bench_kind kind, int id)
{
    unsigned long long sum = 0;

    for (int i = 0; i < ws->count; i++) {
        const struct obx_bench_worker *w = &ws->w[i];

        if (kind == OBX_BENCH_RELAYS && w->relay != NULL) {
            sum += outbox_relay_stat(w->relay, (outbox_relay_stat_id)id);
        } else if (kind == OBX_BENCH_CONSUMERS && w->consumer != NULL) {
            sum += outbox_consumer_stat(w->consumer, (outbox_consumer_stat_id)id);
        }
    }
    return sum;
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
