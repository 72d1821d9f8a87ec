/* SPDX-License-Identifier: MIT */
/*
 * bench.h - outbox-bench: shared pieces of the benchmark driver.
 *
 * Every result is one JSON object per line on stdout, with `bench`, `case`
 * and the parameters that produced it. Each bench measures its raw_*
 * baselines in the same run, so results read as ratios on any machine.
 */
#ifndef OBX_BENCH_H
#define OBX_BENCH_H

#include <jansson.h>
#include <libpq-fe.h>

struct obx_bench_env {
    const char *database_url; /* where the outbox lives (migrated) */
    const char *nats_url;     /* NULL for benches that need no broker */
    double seconds;           /* measuring time per case and round */
    int rounds;               /* cases run interleaved, median reported */
};

/* Prints `line` (taking the reference) as one compact JSON line. */
void obx_bench_emit(json_t *line);

/* Seconds of a monotonic clock. */
double obx_bench_now(void);

/* Median of `n` values (sorts them). */
double obx_bench_median(double *values, int n);

/* A connection to the benchmark database; exits 1 with a message on failure. */
PGconn *obx_bench_connect(const struct obx_bench_env *env);

/* Runs one statement; exits 1 with a message on failure. */
void obx_bench_exec(PGconn *conn, const char *sql);

int obx_bench_enqueue(const struct obx_bench_env *env);

#endif
