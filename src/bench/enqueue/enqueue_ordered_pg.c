/* SPDX-License-Identifier: MIT */
/*
 * enqueue_ordered_pg.c - `outbox-bench enqueue --case ordered`: what
 * per-aggregate ordering (migration 0014) costs a writer, with ordering off
 * and on in the same run.
 *
 * Four workloads, each one event per transaction on every client at once:
 * the C writer (outbox_enqueue) and the SQL writer (outbox.enqueue()), each
 * over 10,000 aggregates (each event picks one at random) and over one hot
 * aggregate (every event the same: the writers queue at its counter row,
 * whose lock is held to commit). Each round runs every workload with
 * ordering off, switches it on (outbox.set_ordering, between slices, when
 * no writer is in a transaction), runs them again, and switches it off:
 * slices of a quarter second taken in turn, so a shared machine's drift
 * falls on both modes alike. Reports events/s off and on, their ratio and
 * the time ordering adds per event and client.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/enqueue/enqueue_sql.h"
#include "outbox/outbox.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { WORKLOADS = 4, MODES = 2, MANY_AGGREGATES = 10000, SLICES_PER_S = 4 };

static const struct {
    const char *writer;
    int aggregates;
} workloads[WORKLOADS] = {{"c", MANY_AGGREGATES}, {"c", 1}, {"sql", MANY_AGGREGATES}, {"sql", 1}};

struct client {
    PGconn *conn;
    unsigned seed;
};

/* The aggregate id of aggregate number `n`. */
static void
aggregate_id(unsigned n, char out[37])
{
    snprintf(out, 37, "%08x-1c2d-7e3f-8a9b-0c1d2e3f4a5b", n);
}

static void
fail_exit(const char *what, const char *message)
{
    fprintf(stderr, "outbox-bench: enqueue ordered: %s: %s\n", what, message);
    exit(1);
}

/* One transaction of one event of workload `w`. */
static void
write_one(struct client *c, int w)
{
    char agg[37];
    outbox_error err = {0};

    aggregate_id(workloads[w].aggregates == 1 ? 0 : (unsigned)rand_r(&c->seed) % MANY_AGGREGATES,
                 agg);
    if (strcmp(workloads[w].writer, "c") == 0) {
        outbox_event *ev = outbox_event_new();

        if (outbox_event_set_route(ev, "movie", "review.logged", &err) != OUTBOX_OK ||
            outbox_event_set_aggregate_id(ev, agg, &err) != OUTBOX_OK ||
            outbox_event_set_payload_json(ev, obx_bench_payload, strlen(obx_bench_payload), &err) !=
                OUTBOX_OK) {
            fail_exit("event", err.message);
        }
        obx_bench_exec(c->conn, "BEGIN");
        if (outbox_enqueue(c->conn, ev, &err) != OUTBOX_OK) {
            fail_exit("outbox_enqueue", err.message);
        }
        obx_bench_exec(c->conn, "COMMIT");
        outbox_event_free(ev);
    } else {
        const char *params[] = {agg, obx_bench_payload};
        PGresult *res =
            PQexecParams(c->conn, "SELECT outbox.enqueue('movie', $1, 'review.logged', $2::jsonb)",
                         2, NULL, params, NULL, NULL, 0);

        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            fail_exit("outbox.enqueue()", PQresultErrorMessage(res));
        }
        PQclear(res);
    }
}

struct job {
    struct client *c;
    int workload;
    double seconds;
    long events;
    double elapsed;
};

static void *
run_client(void *arg)
{
    struct job *job = arg;
    double start = obx_bench_now();

    do {
        write_one(job->c, job->workload);
        job->events++;
        job->elapsed = obx_bench_now() - start;
    } while (job->elapsed < job->seconds);
    return NULL;
}

/* Workload `w` on every client for about `seconds`; adds events and seconds. */
static void
run_slice(struct client *clients, int n, int w, double seconds, double *events, double *elapsed)
{
    struct job jobs[OBX_BENCH_MAX_CLIENTS];
    pthread_t threads[OBX_BENCH_MAX_CLIENTS];
    double longest = 0;

    for (int i = 0; i < n; i++) {
        jobs[i] = (struct job){.c = &clients[i], .workload = w, .seconds = seconds};
        if (pthread_create(&threads[i], NULL, run_client, &jobs[i]) != 0) {
            fail_exit("threads", "cannot start a writer thread");
        }
    }
    for (int i = 0; i < n; i++) {
        pthread_join(threads[i], NULL);
        *events += (double)jobs[i].events;
        longest = jobs[i].elapsed > longest ? jobs[i].elapsed : longest;
    }
    *elapsed += longest;
}

/* One round: every workload off, then on; events/s into rate[workload][mode]. */
static void
run_round(struct client *clients, int n, double seconds, double rate[WORKLOADS][MODES])
{
    double events[WORKLOADS][MODES] = {{0}}, elapsed[WORKLOADS][MODES] = {{0}};
    int slices = (int)(seconds * SLICES_PER_S + 0.5);

    slices = slices < 1 ? 1 : slices;
    for (int s = 0; s < slices; s++) {
        for (int mode = 0; mode < MODES; mode++) {
            obx_bench_set_ordering(clients[0].conn, mode == 1);
            for (int w = 0; w < WORKLOADS; w++) {
                run_slice(clients, n, w, seconds / slices, &events[w][mode], &elapsed[w][mode]);
            }
        }
    }
    obx_bench_exec(clients[0].conn, "SELECT outbox.set_ordering(false)");
    for (int w = 0; w < WORKLOADS; w++) {
        for (int mode = 0; mode < MODES; mode++) {
            rate[w][mode] = elapsed[w][mode] > 0 ? events[w][mode] / elapsed[w][mode] : 0;
        }
    }
}

int
obx_bench_enqueue_ordered(const struct obx_bench_env *env)
{
    struct client clients[OBX_BENCH_MAX_CLIENTS] = {{0}};
    double rates[OBX_BENCH_MAX_ROUNDS][WORKLOADS][MODES], rate[WORKLOADS][MODES];
    double series[OBX_BENCH_MAX_ROUNDS];
    int n = env->clients, rounds = env->rounds; /* checked by main */

    for (int i = 0; i < n; i++) {
        clients[i].conn = obx_bench_connect(env);
        clients[i].seed = 0x5eed + (unsigned)i;
    }
    obx_bench_exec(clients[0].conn, "TRUNCATE outbox.events, outbox.aggregate_heads");
    run_round(clients, n, env->seconds / 4, rate); /* warm-up: counters exist, plans cached */
    for (int r = 0; r < rounds; r++) {
        run_round(clients, n, env->seconds, rates[r]);
    }
    for (int w = 0; w < WORKLOADS; w++) {
        double med[MODES];

        for (int mode = 0; mode < MODES; mode++) {
            for (int r = 0; r < rounds; r++) {
                series[r] = rates[r][w][mode];
            }
            med[mode] = obx_bench_median(series, rounds);
        }
        obx_bench_emit(json_pack(
            "{s:s, s:s, s:s, s:i, s:f, s:f, s:f, s:f, s:i, s:i, s:f}", "bench", "enqueue", "case",
            "ordered", "writer", workloads[w].writer, "aggregates", workloads[w].aggregates,
            "events_per_s_off", med[0], "events_per_s_on", med[1], "ratio_on_to_off",
            med[0] > 0 ? med[1] / med[0] : 0, "added_us_per_event",
            med[0] > 0 && med[1] > 0 ? (1.0 / med[1] - 1.0 / med[0]) * 1e6 * n : 0, "clients", n,
            "rounds", rounds, "seconds_per_round", env->seconds));
    }
    obx_bench_set_ordering(clients[0].conn, env->ordering);
    obx_bench_exec(clients[0].conn, "TRUNCATE outbox.events, outbox.aggregate_heads");
    for (int i = 0; i < n; i++) {
        PQfinish(clients[i].conn);
    }
    return 0;
}
