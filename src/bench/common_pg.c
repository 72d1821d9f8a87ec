/* SPDX-License-Identifier: MIT */
/*
 * common_pg.c - the benchmark driver's output and database helpers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* The ordering obx_bench_migrate() set: -1 before it ran. */
static int schema_ordering = -1;

void
obx_bench_emit(json_t *line)
{
    if (line == NULL) { /* json_pack() refused its format or its values: a bench bug */
        fprintf(stderr, "outbox-bench: cannot build a result line\n");
        exit(1);
    }
    if (schema_ordering >= 0 && json_object_get(line, "ordering") == NULL) {
        const char *name = json_string_value(json_object_get(line, "case"));

        if (name == NULL || strstr(name, "ordered") == NULL) {
            json_object_set_new(line, "ordering", json_boolean(schema_ordering));
        }
    }
    json_dumpf(line, stdout, JSON_COMPACT | JSON_REAL_PRECISION(6));
    fputc('\n', stdout);
    fflush(stdout);
    json_decref(line);
}

double
obx_bench_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

double
obx_bench_median(double *values, int n)
{
    qsort(values, (size_t)n, sizeof(*values), by_value);
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

PGconn *
obx_bench_connect(const struct obx_bench_env *env)
{
    PGconn *conn = PQconnectdb(env->database_url);

    if (PQstatus(conn) != CONNECTION_OK) {
        const char *why = PQerrorMessage(conn);

        fprintf(stderr, "outbox-bench: cannot connect to the database: %.*s\n",
                (int)strcspn(why, "\n"), why);
        exit(1);
    }
    return conn;
}

void
obx_bench_exec(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);

    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        fprintf(stderr, "outbox-bench: statement failed: %.80s: %s", sql,
                PQresultErrorMessage(res));
        exit(1);
    }
    PQclear(res);
}

void
obx_bench_pace(double start, double due_offset_s)
{
    double wait = start + due_offset_s - obx_bench_now();

    if (wait > 0) {
        struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};

        nanosleep(&ts, NULL);
    }
}

void
obx_bench_close(PGconn *conn)
{
    PQfinish(conn);
}

void
obx_bench_sample_by_index(PGconn *conn)
{
    obx_bench_exec(conn, "SET enable_seqscan = off");
    obx_bench_exec(conn, "SET enable_bitmapscan = off");
}

void
obx_bench_migrate(PGconn *conn, const struct obx_bench_env *env)
{
    outbox_error err;

    if (outbox_migrate(conn, "outbox", NULL, &err) != OUTBOX_OK) {
        fprintf(stderr, "outbox-bench: migrate %s: %s\n", PQdb(conn), err.message);
        exit(1);
    }
    obx_bench_set_ordering(conn, env->ordering);
    schema_ordering = env->ordering;
}

void
obx_bench_set_ordering(PGconn *conn, int on)
{
    obx_bench_exec(conn,
                   on ? "SELECT outbox.set_ordering(true)" : "SELECT outbox.set_ordering(false)");
}
