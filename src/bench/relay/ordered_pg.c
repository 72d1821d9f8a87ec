/* SPDX-License-Identifier: MIT */
/*
 * ordered_pg.c - `outbox-bench relay --case ordered`: what publishing from
 * each aggregate's head (migration 0016) costs the relays, beside the same
 * drain with ordering off, in the same run.
 *
 * Three loads of the same size, each drained by two relays at the
 * daemon's defaults: unordered (ordering off), ordered over 10,000
 * aggregates (each event's aggregate is its number modulo 10,000, so
 * consecutive rows belong to different aggregates, as with many busy
 * writers), and ordered over one hot aggregate (every event the same
 * aggregate: each batch waits for the one before it). The ordered loads
 * are written with ordering on, one transaction per 1,000 events, through
 * the SQL writer most services use.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { RELAYS = 2, MANY_AGGREGATES = 10000 };

void
obx_bench_preload_aggregates(PGconn *conn, long long count, int aggregates)
{
    char sql[768];

    obx_bench_set_ordering(conn, aggregates > 0);
    obx_bench_exec(conn, "TRUNCATE outbox.events, outbox.aggregate_heads, outbox.aggregate_skips");
    for (long long done = 0; done < count; done += 1000) {
        long long n = count - done < 1000 ? count - done : 1000;

        snprintf(sql, sizeof(sql),
                 "SELECT count(outbox.enqueue('movie', "
                 "CASE WHEN %d = 0 THEN gen_random_uuid() ELSE "
                 "('00000000-0000-4000-8000-' || lpad(to_hex((%lld + g) %% greatest(%d, 1)), 12, "
                 "'0'))::uuid END, 'review.logged', '%s'::jsonb)) "
                 "FROM generate_series(1, %lld) AS g",
                 aggregates, done, aggregates, obx_bench_payload, n);
        obx_bench_exec(conn, sql);
    }
    obx_bench_exec(conn, "VACUUM ANALYZE outbox.events");
}

/* Drains a load of `aggregates` (0: unordered); returns events/s and fills `c`. */
static double
drain(const struct obx_bench_env *env, PGconn *conn, struct obx_bench_relay_case *c, int aggregates)
{
    double rate;

    *c = (struct obx_bench_relay_case){.replicas = RELAYS,
                                       .batch = env->batch,
                                       .events = env->events,
                                       .pg_postmaster = obx_bench_pg_postmaster(conn)};
    snprintf(c->stream, sizeof(c->stream), "BENCH_ORDERED_%d", aggregates);
    snprintf(c->prefix, sizeof(c->prefix), "benchord%d", aggregates);
    obx_bench_preload_aggregates(conn, env->events, aggregates);
    if (obx_bench_stream_create(env->nats_url, c->stream, c->prefix) != 0) {
        exit(1);
    }
    rate = obx_bench_relay_case(env, c);
    obx_bench_stream_delete(env->nats_url, c->stream);
    return rate;
}

static json_t *
ratio(double a, double b)
{
    return b > 0 ? json_real(a / b) : json_null();
}

void
obx_bench_relay_ordered(const struct obx_bench_env *env, PGconn *conn)
{
    static const int loads[] = {0, MANY_AGGREGATES, 1};
    struct obx_bench_relay_case cases[3];
    double rates[3];

    obx_bench_claim_table(conn, 0);
    for (int i = 0; i < 3; i++) {
        rates[i] = drain(env, conn, &cases[i], loads[i]);
    }
    obx_bench_set_ordering(conn, env->ordering);
    for (int i = 0; i < 3; i++) {
        json_t *line = json_pack("{s:s, s:s, s:s, s:i, s:i, s:I, s:f, s:f, s:b}", "bench", "relay",
                                 "case", "ordered", "load",
                                 i == 0   ? "unordered"
                                 : i == 1 ? "many_aggregates"
                                          : "one_hot_aggregate",
                                 "aggregates", loads[i], "replicas", RELAYS, "events",
                                 (json_int_t)cases[i].finished, "events_per_s", rates[i], "seconds",
                                 cases[i].seconds, "complete", cases[i].complete);

        if (line == NULL) {
            fprintf(stderr, "outbox-bench: out of memory\n");
            exit(1);
        }
        json_object_set_new(line, "pg_cpu_us_per_event",
                            cases[i].pg_cpu_us >= 0 ? json_real(cases[i].pg_cpu_us) : json_null());
        if (i > 0) {
            json_object_set_new(line, "vs_unordered", ratio(rates[i], rates[0]));
        }
        obx_bench_emit(line);
    }
}
