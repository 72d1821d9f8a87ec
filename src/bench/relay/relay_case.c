/* SPDX-License-Identifier: MIT */
/*
 * relay_case.c - one relay drain of a preloaded outbox, timed from the
 * first lease to the last finish, with PostgreSQL's CPU over it: the
 * measurement the rate and ordered cases share.
 */
#include <stdio.h>
#include <stdlib.h>

#include "bench/bench.h"
#include "config/config.h"
#include "outbox/worker.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static void
relay_progress(struct obx_bench_workers *ws, long long *started, long long *done)
{
    *started = (long long)obx_bench_total(ws, OBX_BENCH_RELAYS, OUTBOX_RELAY_LEASED);
    *done = (long long)(obx_bench_total(ws, OBX_BENCH_RELAYS, OUTBOX_RELAY_PUBLISHED) +
                        obx_bench_total(ws, OBX_BENCH_RELAYS, OUTBOX_RELAY_DEAD) +
                        obx_bench_total(ws, OBX_BENCH_RELAYS, OUTBOX_RELAY_INVALID));
}

/*
 * Runs one case on a preloaded outbox: the clock starts when the first row
 * is leased and stops when every row is finished (or the limit runs out:
 * then the rate is of what was finished, and `complete` says so).
 * PostgreSQL's CPU is counted from the relays' start to that last finish.
 */
double
obx_bench_relay_case(const struct obx_bench_env *env, struct obx_bench_relay_case *c)
{
    struct obx_bench_workers ws = {.two_writes = c->two_writes};
    outbox_config *cfg = obx_bench_config(env, OUTBOX_CONFIG_RELAY);
    struct obx_bench_pg_cpu cpu;
    struct obx_bench_run run;

    obx_bench_set(cfg, "stream", c->stream);
    obx_bench_set(cfg, "subject_prefix", c->prefix);
    obx_bench_set(cfg, "relay_mode", c->prune ? "prune" : "mark");
    obx_bench_set_int(cfg, "batch_size", c->batch);
    obx_bench_set_int(cfg, "max_in_flight", OBX_BENCH_RELAY_WINDOW);
    obx_bench_pg_cpu_start(&cpu, c->pg_postmaster);
    obx_bench_relays_start(&ws, cfg, c->replicas);
    outbox_config_free(cfg);
    run = obx_bench_run_until(&ws, c->events, relay_progress);
    c->pg_cpu_us = obx_bench_pg_cpu_us_per_event(&cpu, run.done);
    c->seconds = run.seconds;
    c->finished = run.done;
    c->complete = run.complete;
    c->duplicates = (long long)obx_bench_total(&ws, OBX_BENCH_RELAYS, OUTBOX_RELAY_DUPLICATES);
    obx_bench_workers_stop(&ws);
    return run.seconds > 0 ? (double)run.done / run.seconds : 0;
}
