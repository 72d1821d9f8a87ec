/* SPDX-License-Identifier: MIT */
/*
 * enqueue_pg.c - `outbox-bench enqueue`: the writer's cost against raw
 * INSERTs of an equivalent row, in the same run.
 *
 * Single: a business transaction (BEGIN; INSERT a ~400-byte row into a
 * business table; COMMIT) measured alone, with one raw INSERT of an
 * equivalent outbox row, and with one outbox_enqueue(); each reports its
 * overhead on the business transaction. Batch: 100 rows per transaction,
 * a raw multi-row INSERT against outbox_enqueue_batch().
 * The raw table is LIKE outbox.events INCLUDING ALL: the outbox's columns,
 * defaults, indexes and CHECK constraints, but none of its triggers (the
 * envelope rules and the wake-up): the difference is what pgoutbox adds.
 * The SQL writer's cases and their raw baselines are in enqueue_sql_pg.c;
 * all cases run interleaved, and `--case NAME` runs one case with its
 * baseline. Each case runs on `--clients` connections at once (default 4:
 * services share a database, and one connection alone measures its round
 * trips more than the writer). `--case ordered` measures per-aggregate
 * ordering's cost instead (enqueue_ordered_pg.c).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/enqueue/enqueue_sql.h"
#include "common/buf.h"
#include "outbox/outbox.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { BATCH = 100, C_CASES = 5, CASES = C_CASES + OBX_BENCH_SQL_CASES };

static const char business_row[] =
    "INSERT INTO bench_business (id, body) VALUES (gen_random_uuid(), repeat('x', 400))";

struct bench_state {
    PGconn *conn;
    outbox_event *events[BATCH];
};

static void
setup(PGconn *conn)
{
    obx_bench_exec(conn, "DROP TABLE IF EXISTS bench_business, bench_raw_events");
    obx_bench_exec(conn, "CREATE TABLE bench_business (id uuid PRIMARY KEY, body text)");
    obx_bench_exec(conn, "CREATE TABLE bench_raw_events (LIKE outbox.events INCLUDING ALL)");
    obx_bench_exec(conn, "TRUNCATE outbox.events");
}

static void
check_ok(outbox_status st, const outbox_error *err)
{
    if (st != OUTBOX_OK) {
        fprintf(stderr, "outbox-bench: enqueue failed: %s\n", err->message);
        exit(1);
    }
}

/* One "($n,'movie',$n+1,'review.logged',$n+2::jsonb)" tuple of the raw INSERT. */
static void
raw_row_values(struct obx_buf *b, int first_param)
{
    obx_buf_appendf(b, "%s($%d,'movie',$%d,'review.logged',$%d::jsonb)", first_param > 1 ? "," : "",
                    first_param, first_param + 1, first_param + 2);
}

/* The home-grown equivalent: a hand-built envelope and a plain parameterized INSERT. */
static void
raw_insert(PGconn *conn, int rows)
{
    struct obx_buf sql;
    const char **params = calloc((size_t)rows * 3, sizeof(*params));
    char(*ids)[37] = calloc((size_t)rows, 37), (*aggs)[37] = calloc((size_t)rows, 37);
    char **envs = calloc((size_t)rows, sizeof(*envs));
    PGresult *res;

    obx_buf_init(&sql);
    obx_buf_append_str(&sql, "INSERT INTO bench_raw_events (id, aggregate_type, aggregate_id, "
                             "event_type, envelope) VALUES ");
    for (int i = 0; i < rows; i++) {
        struct obx_buf env;

        obx_bench_time_uuid(ids[i]);
        obx_bench_random_uuid(aggs[i]);
        obx_buf_init(&env);
        obx_buf_appendf(&env,
                        "{\"id\":\"%s\",\"event_type\":\"review.logged\",\"aggregate_type\":"
                        "\"movie\",\"aggregate_id\":\"%s\",\"occurred_at\":"
                        "\"2026-11-29T09:41:56.123Z\",\"schema_version\":1,\"payload\":%s}",
                        ids[i], aggs[i], obx_bench_payload);
        envs[i] = obx_buf_take(&env);
        params[3 * i] = ids[i];
        params[3 * i + 1] = aggs[i];
        params[3 * i + 2] = envs[i];
        raw_row_values(&sql, 3 * i + 1);
    }
    res = PQexecParams(conn, sql.data, rows * 3, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        fprintf(stderr, "outbox-bench: raw insert failed: %s", PQresultErrorMessage(res));
        exit(1);
    }
    PQclear(res);
    for (int i = 0; i < rows; i++) {
        free(envs[i]);
    }
    free(envs);
    free(ids);
    free(aggs);
    free(params);
    obx_buf_fini(&sql);
}

/* One transaction of case `which`; returns the events it wrote. */
static int
run_once(struct bench_state *s, int which)
{
    outbox_error err;
    int events = 0;

    if (which >= C_CASES) {
        return obx_bench_sql_run(s->conn, (enum obx_bench_sql_case)(which - C_CASES));
    }
    obx_bench_exec(s->conn, "BEGIN");
    switch (which) {
    case 0: /* business_only */
        obx_bench_exec(s->conn, business_row);
        break;
    case 1: /* raw_insert_single */
        obx_bench_exec(s->conn, business_row);
        raw_insert(s->conn, 1);
        events = 1;
        break;
    case 2: /* enqueue_single */
        obx_bench_exec(s->conn, business_row);
        s->events[0] = obx_bench_event();
        check_ok(outbox_enqueue(s->conn, s->events[0], &err), &err);
        outbox_event_free(s->events[0]);
        events = 1;
        break;
    case 3: /* raw_insert_batch */
        raw_insert(s->conn, BATCH);
        events = BATCH;
        break;
    default: /* enqueue_batch */
        for (int i = 0; i < BATCH; i++) {
            s->events[i] = obx_bench_event();
        }
        check_ok(outbox_enqueue_batch(s->conn, s->events, BATCH, &err), &err);
        for (int i = 0; i < BATCH; i++) {
            outbox_event_free(s->events[i]);
        }
        events = BATCH;
        break;
    }
    obx_bench_exec(s->conn, "COMMIT");
    return events;
}

/* What one case did in one round, summed over its slices. */
struct tally {
    long tx, events;
    double seconds;
};

/* One client's share of a slice: case `which` for about `seconds`. */
struct slice_job {
    struct bench_state *s;
    int which;
    double seconds;
    struct tally t;
};

static void *
slice_client(void *arg)
{
    struct slice_job *job = arg;
    double start = obx_bench_now(), elapsed;

    do {
        job->t.events += run_once(job->s, job->which);
        job->t.tx++;
        elapsed = obx_bench_now() - start;
    } while (elapsed < job->seconds);
    job->t.seconds = elapsed;
    return NULL;
}

/* Runs case `which` on every client at once for about `seconds`, adding to `t`. */
static void
run_slice(struct bench_state *states, int clients, int which, double seconds, struct tally *t)
{
    struct slice_job jobs[OBX_BENCH_MAX_CLIENTS];
    pthread_t threads[OBX_BENCH_MAX_CLIENTS];
    double longest = 0;

    for (int i = 0; i < clients; i++) {
        jobs[i] = (struct slice_job){.s = &states[i], .which = which, .seconds = seconds};
        if (pthread_create(&threads[i], NULL, slice_client, &jobs[i]) != 0) {
            fprintf(stderr, "outbox-bench: cannot start a writer thread\n");
            exit(1);
        }
    }
    for (int i = 0; i < clients; i++) {
        pthread_join(threads[i], NULL);
        t->events += jobs[i].t.events;
        t->tx += jobs[i].t.tx;
        longest = jobs[i].t.seconds > longest ? jobs[i].t.seconds : longest;
    }
    t->seconds += longest;
}

/*
 * One round: every selected case for `seconds`, in slices of 1/SLICES_PER_S s taken
 * in turn, so the commit latency of a shared disk, which swings from one
 * second to the next, falls on every case alike.
 */
enum { SLICES_PER_S = 4 };

static void
run_round(struct bench_state *s, int clients, const int run[], double seconds, double tx[],
          double ev[])
{
    struct tally t[CASES] = {{0}};
    int slices = (int)(seconds * SLICES_PER_S + 0.5);

    slices = slices < 1 ? 1 : slices;
    for (int i = 0; i < slices; i++) {
        for (int c = 0; c < CASES; c++) {
            if (run[c]) {
                run_slice(s, clients, c, seconds / slices, &t[c]);
            }
        }
    }
    for (int c = 0; c < CASES; c++) {
        tx[c] = t[c].seconds > 0 ? (double)t[c].tx / t[c].seconds : 0;
        ev[c] = t[c].seconds > 0 ? (double)t[c].events / t[c].seconds : 0;
    }
}

/* Every case: its name, events per transaction, the raw case it is compared with, and for
 * the SQL writer's enqueue() cases the floor of one function call per event. */
static const struct {
    const char *name;
    int batch;
    int baseline; /* -1: it is a baseline */
    int floor;    /* -1: none */
} cases[CASES] = {
    {"business_only", 1, -1, -1},
    {"raw_insert_single", 1, -1, -1},
    {"enqueue_single", 1, 1, -1},
    {"raw_insert_batch", BATCH, -1, -1},
    {"enqueue_batch", BATCH, 3, -1},
    {"raw_insert_one", 1, -1, -1},
    {"raw_call_one", 1, -1, -1},
    {"enqueue_sql_single", 1, C_CASES + OBX_BENCH_RAW_INSERT_ONE, C_CASES + OBX_BENCH_RAW_CALL_ONE},
    {"raw_insert_select", OBX_BENCH_SQL_BATCH_SIZE, -1, -1},
    {"raw_call_batch", OBX_BENCH_SQL_BATCH_SIZE, -1, -1},
    {"enqueue_sql_batch", OBX_BENCH_SQL_BATCH_SIZE, C_CASES + OBX_BENCH_RAW_INSERT_SELECT,
     C_CASES + OBX_BENCH_RAW_CALL_BATCH},
    {"enqueue_sql_many", OBX_BENCH_SQL_BATCH_SIZE, C_CASES + OBX_BENCH_RAW_INSERT_SELECT, -1},
};

/* The cases `--case` asks for: that case, its baseline, and business_only for the C single. */
static void
select_cases(const char *only, int run[CASES])
{
    int found = 0;

    for (int c = 0; c < CASES; c++) {
        run[c] = only == NULL;
    }
    for (int c = 0; only != NULL && c < CASES; c++) {
        if (strcmp(cases[c].name, only) == 0) {
            found = 1;
            run[c] = 1;
            if (cases[c].baseline >= 0) {
                run[cases[c].baseline] = 1;
            }
            if (cases[c].floor >= 0) {
                run[cases[c].floor] = 1;
            }
            if (c == 1 || c == 2) {
                run[0] = 1;
            }
        }
    }
    if (only != NULL && !found) {
        fprintf(stderr, "outbox-bench: --case: no enqueue case named \"%s\"\n", only);
        exit(2);
    }
}

static void
emit_results(double tx[CASES], double ev[CASES], const int run[CASES],
             const struct obx_bench_env *env)
{
    for (int c = 1; c < CASES; c++) {
        json_t *line;

        if (!run[c]) {
            continue;
        }
        /* settings: what differs from the defaults of pgoutbox and PostgreSQL (nothing). */
        line = json_pack("{s:s, s:s, s:f, s:f, s:i, s:i, s:i, s:f, s:{}}", "bench", "enqueue",
                         "case", cases[c].name, "events_per_s", ev[c], "tx_per_s", tx[c], "batch",
                         cases[c].batch, "clients", env->clients, "rounds", env->rounds,
                         "seconds_per_round", env->seconds, "settings");
        if ((c == 1 || c == 2) && run[0]) {
            /* Time added to the business transaction, against that transaction alone. */
            json_object_set_new(line, "business_only_tx_per_s", json_real(tx[0]));
            json_object_set_new(line, "overhead_pct", json_real((tx[0] / tx[c] - 1.0) * 100.0));
        }
        if (cases[c].baseline >= 0) {
            json_object_set_new(line, "baseline", json_string(cases[cases[c].baseline].name));
            json_object_set_new(line, "ratio_to_raw", json_real(ev[c] / ev[cases[c].baseline]));
        }
        if (cases[c].floor >= 0 && run[cases[c].floor]) {
            json_object_set_new(line, "floor", json_string(cases[cases[c].floor].name));
            json_object_set_new(line, "ratio_to_floor", json_real(ev[c] / ev[cases[c].floor]));
        }
        obx_bench_emit(line);
    }
}

int
obx_bench_enqueue(const struct obx_bench_env *env)
{
    struct bench_state s[OBX_BENCH_MAX_CLIENTS] = {{0}};
    double tx[CASES][OBX_BENCH_MAX_ROUNDS] = {{0}}, ev[CASES][OBX_BENCH_MAX_ROUNDS] = {{0}};
    double tx_med[CASES] = {0}, ev_med[CASES] = {0}, round_tx[CASES], round_ev[CASES];
    int rounds = env->rounds;   /* 1..OBX_BENCH_MAX_ROUNDS, checked by main */
    int clients = env->clients; /* 1..OBX_BENCH_MAX_CLIENTS, checked by main */
    int run[CASES];

    if (env->only_case != NULL && strcmp(env->only_case, "ordered") == 0) {
        return obx_bench_enqueue_ordered(env);
    }
    select_cases(env->only_case, run);
    for (int i = 0; i < clients; i++) {
        s[i].conn = obx_bench_connect(env);
    }
    setup(s[0].conn);
    for (int i = 0; i < clients; i++) {
        obx_bench_sql_prepare(s[i].conn);
    }
    run_round(s, clients, run, env->seconds / 4, round_tx, round_ev); /* warm-up */
    /* Interleaved rounds, so drift of a shared machine hits every case alike. */
    for (int r = 0; r < rounds; r++) {
        run_round(s, clients, run, env->seconds, round_tx, round_ev);
        for (int c = 0; c < CASES; c++) {
            tx[c][r] = round_tx[c];
            ev[c][r] = round_ev[c];
        }
    }
    for (int c = 0; c < CASES; c++) {
        tx_med[c] = obx_bench_median(tx[c], rounds);
        ev_med[c] = obx_bench_median(ev[c], rounds);
    }
    emit_results(tx_med, ev_med, run, env);
    obx_bench_exec(s[0].conn, "DROP TABLE bench_business, bench_raw_events");
    obx_bench_exec(s[0].conn, "TRUNCATE outbox.events");
    for (int i = 0; i < clients; i++) {
        PQfinish(s[i].conn);
    }
    return 0;
}
