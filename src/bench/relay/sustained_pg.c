/* SPDX-License-Identifier: MIT */
/*
 * sustained_pg.c - what users run: two relays at the daemon's defaults
 * and busy writers sharing the machine, on a freshly migrated database
 * (no statistics, no vacuum yet) with PostgreSQL's default settings.
 * Writers ask 10,000 events/s for 60 s, 100 events per transaction, through
 * the C batch writer (--writer c) or 100 outbox.enqueue() calls (--writer
 * sql). Every 250 ms the bench samples the backlog and the outbox's dead
 * tuples; the relays' own histograms give the lease and finish latency.
 * Dead tuples from leasing and finishing, and plans chosen without
 * statistics, are what sink a PostgreSQL queue here.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/stream_audit.h"
#include "bench/bench.h"
#include "common/buf.h"
#include "outbox/worker.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { WRITERS = 4, RELAYS = 2, PER_TX = 100, SAMPLE_MS = 250 };

#define FRESH_DB "outbox_bench_sustained"

struct writer {
    const struct obx_bench_env *env; /* pointed at the fresh database */
    int sql;                         /* 1: outbox.enqueue() calls, 0: outbox_enqueue_batch() */
    double rate_per_s;               /* this writer's share */
    double seconds;
    long long written;
    pthread_t thread;
};

/* One transaction of PER_TX outbox.enqueue() calls, one statement each, as a service sends. */
static void
write_sql_batch(PGconn *conn)
{
    const char *params[] = {obx_bench_payload};

    obx_bench_exec(conn, "BEGIN");
    for (int i = 0; i < PER_TX; i++) {
        PGresult *res = PQexecParams(conn,
                                     "SELECT outbox.enqueue('movie', gen_random_uuid(), "
                                     "'review.logged', $1::jsonb)",
                                     1, NULL, params, NULL, NULL, 0);

        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            fprintf(stderr, "outbox-bench: outbox.enqueue failed: %s", PQerrorMessage(conn));
            exit(1);
        }
        PQclear(res);
    }
    obx_bench_exec(conn, "COMMIT");
}

static void *
writer_main(void *arg)
{
    struct writer *w = arg;
    PGconn *conn = obx_bench_connect(w->env);
    double start = obx_bench_now();

    for (long long tx = 0;; tx++) {
        double due = (double)(tx * PER_TX) / w->rate_per_s;

        if (due >= w->seconds || obx_bench_now() - start >= w->seconds) {
            break; /* a writer behind its schedule stops on time too: its rate is what it reached */
        }
        obx_bench_pace(start, due);
        if (w->sql) {
            write_sql_batch(conn);
        } else {
            obx_bench_write_batch(conn, PER_TX);
        }
        w->written += PER_TX;
    }
    PQfinish(conn);
    return NULL;
}

/* `conninfo` with its database replaced by `dbname`, as a key=value string (malloc'ed). */
static char *
conninfo_for(const char *conninfo, const char *dbname)
{
    char *error = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo, &error);
    struct obx_buf out;
    char *text;

    if (opts == NULL) {
        fprintf(stderr, "outbox-bench: database url: %s\n", error ? error : "out of memory");
        exit(1);
    }
    obx_buf_init(&out);
    for (PQconninfoOption *o = opts; o->keyword != NULL; o++) {
        const char *v = strcmp(o->keyword, "dbname") == 0 ? dbname : o->val;

        if (v == NULL) {
            continue;
        }
        obx_buf_appendf(&out, "%s%s='", out.len > 0 ? " " : "", o->keyword);
        for (const char *c = v; *c != '\0'; c++) {
            if (*c == '\'' || *c == '\\') {
                obx_buf_append(&out, "\\", 1);
            }
            obx_buf_append(&out, c, 1);
        }
        obx_buf_append_str(&out, "'");
    }
    PQconninfoFree(opts);
    text = obx_buf_take(&out);
    if (text == NULL) {
        fprintf(stderr, "outbox-bench: out of memory\n");
        exit(1);
    }
    return text;
}

/* A new database, migrated and nothing else: no statistics, never vacuumed. */
static void
fresh_database(PGconn *conn, const struct obx_bench_env *fresh)
{
    PGconn *db;
    outbox_error err;

    obx_bench_exec(conn, "DROP DATABASE IF EXISTS " FRESH_DB " WITH (FORCE)");
    obx_bench_exec(conn, "CREATE DATABASE " FRESH_DB);
    db = obx_bench_connect(fresh);
    if (outbox_migrate(db, "outbox", NULL, &err) != OUTBOX_OK) {
        fprintf(stderr, "outbox-bench: migrate " FRESH_DB ": %s\n", err.message);
        exit(1);
    }
    obx_bench_close(db);
}

static long long
backlog(PGconn *conn)
{
    return obx_bench_scalar(conn, "SELECT count(*) FROM outbox.events "
                                  "WHERE published_at IS NULL AND status IN ('pending', 'leased')");
}

/* The largest values seen while the writers ran. */
struct peaks {
    long long backlog, dead_tuples, samples;
};

static void
sample(PGconn *conn, struct peaks *p)
{
    long long waiting = backlog(conn);
    long long dead = obx_bench_scalar(conn, "SELECT n_dead_tup FROM pg_stat_user_tables "
                                            "WHERE schemaname = 'outbox' AND relname = 'events'");

    p->backlog = waiting > p->backlog ? waiting : p->backlog;
    p->dead_tuples = dead > p->dead_tuples ? dead : p->dead_tuples;
    p->samples++;
}

/*
 * The q-quantile of the relays' histogram `id`, in ms: linear within its
 * bucket, as Prometheus' histogram_quantile() reads it. `*bucket_ms` gets
 * that bucket's upper bound (-1: past the last finite bound).
 */
static double
quantile_ms(struct obx_bench_workers *ws, outbox_relay_histogram_id id, double q, double *bucket_ms)
{
    enum { MAX_BUCKETS = 32 };
    const double *bounds;
    size_t n = outbox_histogram_bounds(&bounds);
    unsigned long long at_or_below[MAX_BUCKETS] = {0}; /* cumulative, as the relays give them */
    double sum, rank;

    n = n < MAX_BUCKETS ? n : MAX_BUCKETS;
    for (int r = 0; r < ws->count; r++) {
        unsigned long long one[MAX_BUCKETS];
        size_t got = outbox_relay_histogram(ws->w[r].relay, id, one, n, &sum);

        for (size_t b = 0; b < got; b++) {
            at_or_below[b] += one[b];
        }
    }
    *bucket_ms = -1;
    if (n == 0 || at_or_below[n - 1] == 0) {
        return -1;
    }
    rank = q * (double)at_or_below[n - 1];
    for (size_t b = 0; b < n; b++) {
        double lo = b == 0 ? 0 : bounds[b - 1];
        double below = b == 0 ? 0 : (double)at_or_below[b - 1];
        double in_bucket = (double)at_or_below[b] - below;

        if ((double)at_or_below[b] >= rank && in_bucket > 0) {
            if (b + 1 == n) {
                return lo * 1000; /* past the last finite bound: all that can be said */
            }
            *bucket_ms = bounds[b] * 1000;
            return (lo + (bounds[b] - lo) * ((rank - below) / in_bucket)) * 1000;
        }
    }
    return -1;
}

static void
start_relays(const struct obx_bench_env *fresh, struct obx_bench_workers *ws)
{
    outbox_config *cfg = obx_bench_config(fresh, OUTBOX_CONFIG_RELAY);

    /* Where to publish, and nothing else unless --batch says: the daemon's defaults. */
    obx_bench_set(cfg, "stream", "BENCH_SUSTAINED");
    obx_bench_set(cfg, "subject_prefix", "benchsus");
    if (fresh->batch_given) {
        obx_bench_set_int(cfg, "batch_size", fresh->batch);
    }
    obx_bench_relays_start(ws, cfg, RELAYS);
    outbox_config_free(cfg);
}

static void
start_writers(struct writer *writers, const struct obx_bench_env *fresh, int sql, double rate,
              double seconds)
{
    for (int i = 0; i < WRITERS; i++) {
        writers[i] = (struct writer){
            .env = fresh, .sql = sql, .rate_per_s = rate / WRITERS, .seconds = seconds};
        if (pthread_create(&writers[i].thread, NULL, writer_main, &writers[i]) != 0) {
            fprintf(stderr, "outbox-bench: cannot start writer thread %d\n", i);
            abort(); /* the relays and writers already running cannot be joined cleanly */
        }
    }
}

/* What the table holds once drained: bytes per retained row, and the time each row waited. */
struct after {
    long long rows, bytes_per_row;
    double wait_p50_ms, wait_p99_ms;
};

static void
measure_after(PGconn *conn, struct after *a)
{
    PGresult *res = PQexec(
        conn, "SELECT count(*), pg_total_relation_size('outbox.events') / greatest(count(*), 1), "
              "1000 * extract(epoch FROM percentile_cont(0.5) WITHIN GROUP "
              "(ORDER BY published_at - created_at)), "
              "1000 * extract(epoch FROM percentile_cont(0.99) WITHIN GROUP "
              "(ORDER BY published_at - created_at)) "
              "FROM outbox.events WHERE status = 'done'");

    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        a->rows = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        a->bytes_per_row = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
        a->wait_p50_ms = strtod(PQgetvalue(res, 0, 2), NULL);
        a->wait_p99_ms = strtod(PQgetvalue(res, 0, 3), NULL);
    }
    PQclear(res);
}

int
obx_bench_sustained(const struct obx_bench_env *env)
{
    const double rate = 10000, seconds = env->sustain_seconds;
    int sql = strcmp(env->writer, "sql") == 0;
    struct writer writers[WRITERS];
    struct obx_bench_workers relays = {0};
    struct obx_bench_env fresh = *env;
    PGconn *admin = obx_bench_connect(env), *conn;
    struct peaks peaks = {0};
    struct after after = {0};
    long long written = 0, at_end, left, wal_start;
    double start, stop, drained, lease_p50, lease_p99, finish_p99, b50, b99, bf99;
    char *url = conninfo_for(env->database_url, FRESH_DB);
    json_t *settings = json_object();

    if (env->batch_given) {
        json_object_set_new(settings, "batch_size", json_integer(env->batch));
    }

    fresh.database_url = url;
    fresh_database(admin, &fresh);
    conn = obx_bench_connect(&fresh);
    if (obx_bench_stream_create(env->nats_url, "BENCH_SUSTAINED", "benchsus") != 0) {
        return 1;
    }
    wal_start = obx_bench_scalar(conn, "SELECT pg_current_wal_lsn() - '0/0'");
    start_relays(&fresh, &relays);
    start = obx_bench_now();
    start_writers(writers, &fresh, sql, rate, seconds);
    while (obx_bench_now() - start < seconds) {
        sample(conn, &peaks);
        obx_bench_pace(obx_bench_now(), SAMPLE_MS / 1000.0);
    }
    for (int i = 0; i < WRITERS; i++) {
        pthread_join(writers[i].thread, NULL);
        written += writers[i].written;
    }
    stop = obx_bench_now();
    sample(conn, &peaks);
    at_end = backlog(conn);
    for (left = at_end; left > 0 && obx_bench_now() - stop < 120;) {
        obx_bench_pace(obx_bench_now(), 0.02);
        left = backlog(conn);
    }
    drained = obx_bench_now() - stop;
    lease_p50 = quantile_ms(&relays, OUTBOX_RELAY_LEASE_SECONDS, 0.5, &b50);
    lease_p99 = quantile_ms(&relays, OUTBOX_RELAY_LEASE_SECONDS, 0.99, &b99);
    finish_p99 = quantile_ms(&relays, OUTBOX_RELAY_FINISH_SECONDS, 0.99, &bf99);
    obx_bench_workers_stop(&relays);
    measure_after(conn, &after);
    obx_bench_emit(json_pack(
        "{s:s, s:s, s:s, s:o, s:f, s:f, s:i, s:i, s:i, s:I, s:f, s:I, s:I, s:f, s:f, s:f, s:f, "
        "s:f, s:f, s:I, s:I, s:I, s:f, s:f, s:I}",
        "bench", "relay", "case", "sustained", "writer", sql ? "sql" : "c", "settings", settings, "rate",
        rate, "seconds", seconds, "replicas", RELAYS, "writers", WRITERS, "per_tx", PER_TX,
        "written", (json_int_t)written, "write_events_per_s", (double)written / (stop - start),
        "backlog_max", (json_int_t)peaks.backlog, "backlog_at_end", (json_int_t)at_end,
        "backlog_max_seconds_of_production", (double)peaks.backlog / rate, "drain_seconds",
        left == 0 ? drained : -1.0, "lease_p50_ms", lease_p50, "lease_p99_ms", lease_p99,
        "lease_p99_bucket_ms", b99, "finish_p99_ms", finish_p99, "dead_tuples_max",
        (json_int_t)peaks.dead_tuples, "bytes_per_retained_row", (json_int_t)after.bytes_per_row,
        "wal_bytes_per_event",
        (json_int_t)(after.rows > 0 ? (obx_bench_scalar(conn, "SELECT pg_current_wal_lsn() - "
                                                              "'0/0'") -
                                       wal_start) /
                                          after.rows
                                    : -1),
        "created_to_published_p50_ms", after.wait_p50_ms, "created_to_published_p99_ms",
        after.wait_p99_ms, "stream_msgs",
        (json_int_t)obx_stream_message_count(env->nats_url, "BENCH_SUSTAINED")));
    (void)b50;
    (void)bf99;
    obx_bench_stream_delete(env->nats_url, "BENCH_SUSTAINED");
    obx_bench_close(conn);
    obx_bench_exec(admin, "DROP DATABASE IF EXISTS " FRESH_DB " WITH (FORCE)");
    obx_bench_close(admin);
    free(url);
    return 0;
}
