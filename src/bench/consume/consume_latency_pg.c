/* SPDX-License-Identifier: MIT */
/*
 * consume_latency_pg.c - end-to-end latency: a writer commits one event per
 * transaction at a fixed rate, a relay publishes it, a consumer's SQL
 * handler records when it ran. Latency is handled_at minus the event's
 * occurred_at (taken just before the commit), computed by the database.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench/bench.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static void
start_workers(const struct obx_bench_env *env, struct obx_bench_workers *ws)
{
    outbox_config *rc = obx_bench_config(env, OUTBOX_CONFIG_RELAY);
    outbox_config *cc = obx_bench_config(env, OUTBOX_CONFIG_CONSUMER);

    obx_bench_set(rc, "stream", "BENCH_E2E");
    obx_bench_set(rc, "subject_prefix", "benche2e");
    obx_bench_set(cc, "stream", "BENCH_E2E");
    obx_bench_set(cc, "subject_prefix", "benche2e");
    obx_bench_set(cc, "consumer_name", "bench-e2e");
    obx_bench_set_int(cc, "poll_max_ms", 100);
    obx_bench_relays_start(ws, rc, 1);
    obx_bench_consumers_start(ws, cc, 1, &(struct obx_bench_handler){.sql = obx_bench_handler_sql});
    outbox_config_free(rc);
    outbox_config_free(cc);
}

static int
percentiles(PGconn *conn, double *p50, double *p99, long long *samples)
{
    PGresult *res =
        PQexec(conn, "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), "
                     "percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), count(*) "
                     "FROM (SELECT extract(epoch FROM f.handled_at - "
                     "(e.envelope->>'occurred_at')::timestamptz) * 1000 AS ms "
                     "FROM bench_effects f JOIN outbox.events e ON e.id = f.event_id) AS s");
    int ok =
        PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 && !PQgetisnull(res, 0, 0);

    if (ok) {
        *p50 = strtod(PQgetvalue(res, 0, 0), NULL);
        *p99 = strtod(PQgetvalue(res, 0, 1), NULL);
        *samples = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
    }
    PQclear(res);
    return ok ? 0 : -1;
}

int
obx_bench_consume_latency(const struct obx_bench_env *env, PGconn *conn, int rate_per_s,
                          double seconds, double *p50_ms, double *p99_ms, long long *samples)
{
    struct obx_bench_workers ws = {0};
    long long count = (long long)(rate_per_s * seconds);
    double start, deadline;

    obx_bench_effects_reset(conn);
    if (obx_bench_stream_create(env->nats_url, "BENCH_E2E", "benche2e") != 0) {
        return -1;
    }
    start_workers(env, &ws);
    start = obx_bench_now();
    for (long long i = 0; i < count; i++) {
        obx_bench_pace(start, (double)i / rate_per_s);
        obx_bench_write_batch(conn, 1);
    }
    deadline = obx_bench_now() + 15;
    while (obx_bench_scalar(conn, "SELECT count(*) FROM bench_effects") < count &&
           obx_bench_now() < deadline) {
        obx_bench_pace(obx_bench_now(), 0.02);
    }
    obx_bench_workers_stop(&ws);
    obx_bench_stream_delete(env->nats_url, "BENCH_E2E");
    return percentiles(conn, p50_ms, p99_ms, samples);
}
