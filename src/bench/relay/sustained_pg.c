/* SPDX-License-Identifier: MIT */
/*
 * sustained_pg.c - what users run: two relays at the daemon's defaults
 * and busy writers sharing the machine, on a freshly migrated database
 * (no statistics, no vacuum yet) with PostgreSQL's default settings.
 * Writers ask 10,000 events/s for 60 s, 100 events per transaction, through
 * the C batch writer (--writer c) or 100 outbox.enqueue() calls (--writer
 * sql). Every 250 ms the bench samples the backlog (from the writers' and
 * the relays' counters: no query) and the outbox's dead tuples; the relays'
 * own histograms give the lease and finish latency.
 * Dead tuples from leasing and finishing, and plans chosen without
 * statistics, are what sink a PostgreSQL queue here. PostgreSQL's CPU is
 * counted from the writers' start to the end of the drain, per event the
 * relays finished: the writers' inserts and the bench's samples are in
 * it. --two-writes runs the relays on the two-write claim to compare.
 * First, the same writers run alone, unpaced, on another fresh database with
 * no relay and no broker traffic: the most they can write on this machine,
 * the raw limit the sustained rate is read against.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/stream_audit.h"
#include "bench/bench.h"
#include "common/buf.h"
#include "outbox/worker.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { WRITERS = 4, RELAYS = 2, PER_TX = 100, SAMPLE_MS = 250, BLOAT_EVENTS = 300000 };

/*
 * The writers alone: how long (at most; never longer than the sustained run)
 * and the rate they are asked, far above what any writer here reaches, so
 * their pacing never waits.
 */
enum { ALONE_SECONDS = 10, ALONE_ASKED_PER_S = 100000 };

#define FRESH_DB "outbox_bench_sustained"

struct writer {
    const struct obx_bench_env *env; /* pointed at the fresh database */
    int index;
    int sql;           /* 1: outbox.enqueue() calls, 0: outbox_enqueue_batch() */
    double rate_per_s; /* this writer's share */
    double seconds;
    long long max_tx;     /* transactions this writer may commit: its seq range */
    double *commit_at;    /* by transaction, obx_bench_now() when its COMMIT returned */
    atomic_llong written; /* events committed: read by the sampler meanwhile */
    pthread_t thread;
};

/* The bench's payload tagged with the event's number: {"seq":N,"stars":5,...}. */
static void
tagged_payload(char *out, size_t cap, long long seq)
{
    /* cap (1024) holds the ~330-byte payload and the tag with room to spare. */
    snprintf(out, cap, "{\"seq\":%lld,%s", seq, obx_bench_payload + 1);
}

static long long
first_seq(const struct writer *w, long long tx)
{
    return ((long long)w->index * w->max_tx + tx) * PER_TX;
}

/*
 * The statement a service's driver sends for each event: prepared once per
 * connection, as pgx (by default), psycopg 3 and pgJDBC (after a few
 * executions of one statement) do; an unnamed statement would be parsed
 * and planned again on every call.
 */
static const char enqueue_sql[] =
    "SELECT outbox.enqueue('movie', gen_random_uuid(), 'review.logged', $1::jsonb)";

static void
prepare_sql_writer(PGconn *conn)
{
    PGresult *res = PQprepare(conn, "bench_enqueue", enqueue_sql, 1, NULL);

    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        fprintf(stderr, "outbox-bench: prepare outbox.enqueue: %s", PQresultErrorMessage(res));
        exit(1);
    }
    PQclear(res);
}

/* One transaction of PER_TX outbox.enqueue() calls, one statement each, as a service sends. */
static void
write_sql_batch(PGconn *conn, long long seq)
{
    char payload[1024];
    const char *params[] = {payload};

    obx_bench_exec(conn, "BEGIN");
    for (int i = 0; i < PER_TX; i++) {
        PGresult *res;

        tagged_payload(payload, sizeof(payload), seq + i);
        res = PQexecPrepared(conn, "bench_enqueue", 1, params, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            fprintf(stderr, "outbox-bench: outbox.enqueue failed: %s", PQerrorMessage(conn));
            exit(1);
        }
        PQclear(res);
    }
    obx_bench_exec(conn, "COMMIT");
}

/* One outbox_enqueue_batch() of PER_TX events in a transaction. */
static void
write_c_batch(PGconn *conn, long long seq)
{
    char payload[1024];
    outbox_event *events[PER_TX];
    outbox_error err;

    for (int i = 0; i < PER_TX; i++) {
        events[i] = obx_bench_event();
        tagged_payload(payload, sizeof(payload), seq + i);
        if (outbox_event_set_payload_json(events[i], payload, strlen(payload), &err) != OUTBOX_OK) {
            fprintf(stderr, "outbox-bench: payload: %s\n", err.message);
            exit(1);
        }
    }
    obx_bench_exec(conn, "BEGIN");
    if (outbox_enqueue_batch(conn, events, PER_TX, &err) != OUTBOX_OK) {
        fprintf(stderr, "outbox-bench: enqueue failed: %s\n", err.message);
        exit(1);
    }
    obx_bench_exec(conn, "COMMIT");
    for (int i = 0; i < PER_TX; i++) {
        outbox_event_free(events[i]);
    }
}

static void *
writer_main(void *arg)
{
    struct writer *w = arg;
    PGconn *conn = obx_bench_connect(w->env);
    double start = obx_bench_now();

    if (w->sql) {
        prepare_sql_writer(conn);
    }
    for (long long tx = 0; tx < w->max_tx; tx++) {
        double due = (double)(tx * PER_TX) / w->rate_per_s;

        if (due >= w->seconds || obx_bench_now() - start >= w->seconds) {
            break; /* a writer behind its schedule stops on time too: its rate is what it reached */
        }
        obx_bench_pace(start, due);
        if (w->sql) {
            write_sql_batch(conn, first_seq(w, tx));
        } else {
            write_c_batch(conn, first_seq(w, tx));
        }
        w->commit_at[tx] = obx_bench_now();
        atomic_fetch_add(&w->written, PER_TX);
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

    obx_bench_exec(conn, "DROP DATABASE IF EXISTS " FRESH_DB " WITH (FORCE)");
    obx_bench_exec(conn, "CREATE DATABASE " FRESH_DB);
    db = obx_bench_connect(fresh);
    obx_bench_migrate(db, fresh);
    obx_bench_close(db);
}

static long long
backlog(PGconn *conn)
{
    return obx_bench_waiting(conn, 0);
}

/*
 * The bloated table: BLOAT_EVENTS written as fast as one connection can and
 * relayed by the running relays before the measured load starts, with no
 * vacuum, so the measure begins on done rows kept in mark mode and the dead
 * versions and index entries their leases and finishes left (autovacuum may
 * come by later, as it would).
 */
static void
bloat(PGconn *conn)
{
    for (long long done = 0; done < BLOAT_EVENTS; done += 1000) {
        obx_bench_write_batch(conn, 1000);
    }
    for (double start = obx_bench_now(); backlog(conn) > 0 && obx_bench_now() - start < 120;) {
        obx_bench_pace(obx_bench_now(), 0.1);
    }
}

/* The largest values seen while the writers ran. */
struct peaks {
    long long backlog, dead_tuples, samples;
};

/* What the sampler needs: the writers and relays to count, and the relays' count at the start. */
struct load {
    struct writer *writers;
    struct obx_bench_workers *relays;
    long long finished_start;
};

/* Events the relays finished (published, dead or invalid). */
static long long
relays_finished(struct obx_bench_workers *ws)
{
    return (long long)(obx_bench_total(ws, OBX_BENCH_RELAYS, OUTBOX_RELAY_PUBLISHED) +
                       obx_bench_total(ws, OBX_BENCH_RELAYS, OUTBOX_RELAY_DEAD) +
                       obx_bench_total(ws, OBX_BENCH_RELAYS, OUTBOX_RELAY_INVALID));
}

/*
 * Events committed and not yet finished, from the writers' and the relays'
 * counters. Counting them in the table (through the window index, which in
 * mark mode still holds every published row after the relays' floor) took
 * 0.3-0.6 s a sample in the server on fresh and bloated tables alike, a
 * quarter of this machine's CPU taken from the load it measures. A relay that
 * published a row twice counts it twice, so this may read low by the
 * duplicates: the end of the drain is confirmed in the table.
 */
static long long
load_backlog(const struct load *l)
{
    long long written = 0;

    for (int i = 0; i < WRITERS; i++) {
        written += atomic_load(&l->writers[i].written);
    }
    return written - (relays_finished(l->relays) - l->finished_start);
}

static void
sample(PGconn *conn, const struct load *l, struct peaks *p)
{
    long long waiting = load_backlog(l);
    long long dead = obx_bench_scalar(conn, "SELECT n_dead_tup FROM pg_stat_user_tables "
                                            "WHERE schemaname = 'outbox' AND relname = 'events'");

    p->backlog = waiting > p->backlog ? waiting : p->backlog;
    p->dead_tuples = dead > p->dead_tuples ? dead : p->dead_tuples;
    p->samples++;
}

enum { MAX_BUCKETS = 32 };

/* The relays' histogram `id`, summed: per bucket, at or below its bound, as the relays give them.
 */
struct relay_counts {
    unsigned long long at_or_below[MAX_BUCKETS];
};

static void
relay_counts(struct obx_bench_workers *ws, outbox_relay_histogram_id id, struct relay_counts *c)
{
    const double *bounds;
    size_t n = outbox_histogram_bounds(&bounds);
    double sum;

    (void)bounds;
    memset(c, 0, sizeof(*c));
    n = n < MAX_BUCKETS ? n : MAX_BUCKETS;
    for (int r = 0; r < ws->count; r++) {
        unsigned long long one[MAX_BUCKETS];
        size_t got = outbox_relay_histogram(ws->w[r].relay, id, one, n, &sum);

        for (size_t b = 0; b < got; b++) {
            c->at_or_below[b] += one[b];
        }
    }
}

/* What the relays' lease and finish histograms held when the measure began. */
struct measure_start {
    struct relay_counts lease, finish;
};

/*
 * The q-quantile of the relays' histogram `id` since `since`, in ms: linear
 * within its bucket, as Prometheus' histogram_quantile() reads it.
 * `*bucket_ms` gets that bucket's upper bound (-1: past the last finite bound).
 */
static double
quantile_ms(struct obx_bench_workers *ws, outbox_relay_histogram_id id,
            const struct relay_counts *since, double q, double *bucket_ms)
{
    const double *bounds;
    size_t n = outbox_histogram_bounds(&bounds);
    struct relay_counts now;
    unsigned long long *at_or_below = now.at_or_below;
    double rank;

    n = n < MAX_BUCKETS ? n : MAX_BUCKETS;
    relay_counts(ws, id, &now);
    for (size_t b = 0; b < n; b++) {
        at_or_below[b] -= since->at_or_below[b];
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
    ws->two_writes = fresh->two_writes;
    obx_bench_relays_start(ws, cfg, RELAYS);
    outbox_config_free(cfg);
}

static void
start_writers(struct writer *writers, const struct obx_bench_env *fresh, int sql, double rate,
              double seconds)
{
    for (int i = 0; i < WRITERS; i++) {
        writers[i] = (struct writer){.env = fresh,
                                     .index = i,
                                     .sql = sql,
                                     .rate_per_s = rate / WRITERS,
                                     .seconds = seconds,
                                     .max_tx = (long long)(seconds * rate / WRITERS / PER_TX) + 1};
        writers[i].commit_at = calloc((size_t)writers[i].max_tx, sizeof(double));
        if (writers[i].commit_at == NULL ||
            pthread_create(&writers[i].thread, NULL, writer_main, &writers[i]) != 0) {
            fprintf(stderr, "outbox-bench: cannot start writer thread %d\n", i);
            abort(); /* the relays and writers already running cannot be joined cleanly */
        }
    }
}

/* Commit-to-ack of every event the watch saw, in ms: p50 and p99; returns the samples. */
static long long
commit_to_ack(struct writer *writers, struct obx_bench_ack_watch *watch, double *p50, double *p99)
{
    long long total = 0, n = 0;
    double *ms;

    for (int w = 0; w < WRITERS; w++) {
        total += writers[w].written;
    }
    ms = calloc((size_t)(total > 0 ? total : 1), sizeof(*ms));
    if (ms == NULL) {
        fprintf(stderr, "outbox-bench: out of memory\n");
        exit(1);
    }
    for (int w = 0; w < WRITERS; w++) {
        for (long long tx = 0; tx < writers[w].written / PER_TX; tx++) {
            for (int i = 0; i < PER_TX; i++) {
                double at = obx_bench_ack_watch_arrival(watch, first_seq(&writers[w], tx) + i);

                if (at > 0 && n < total) {
                    double d = (at - writers[w].commit_at[tx]) * 1000;

                    ms[n++] = d > 0 ? d : 0;
                }
            }
        }
    }
    *p50 = n ? obx_bench_median(ms, (int)n) : -1;
    *p99 = n ? ms[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] : -1; /* sorted by median() */
    free(ms);
    return n;
}

/* What the table holds once drained: bytes per retained row. */
static long long
bytes_per_row(PGconn *conn)
{
    return obx_bench_scalar(conn, "SELECT pg_total_relation_size('outbox.events') / "
                                  "greatest(count(*), 1) FROM outbox.events");
}

static long long
wal_position(PGconn *conn)
{
    return obx_bench_scalar(conn, "SELECT pg_current_wal_lsn() - '0/0'");
}

static void
set_number(json_t *line, const char *key, double value)
{
    json_object_set_new(line, key, json_real(value));
}

static void
set_count(json_t *line, const char *key, long long value)
{
    json_object_set_new(line, key, json_integer(value));
}

/* The relays' lease and finish latency from their histograms. */
static void
add_latencies(json_t *line, struct obx_bench_workers *relays, const struct measure_start *m)
{
    double bucket;

    set_number(line, "lease_p50_ms",
               quantile_ms(relays, OUTBOX_RELAY_LEASE_SECONDS, &m->lease, 0.5, &bucket));
    set_number(line, "lease_p99_ms",
               quantile_ms(relays, OUTBOX_RELAY_LEASE_SECONDS, &m->lease, 0.99, &bucket));
    set_number(line, "lease_p99_bucket_ms", bucket);
    set_number(line, "finish_p50_ms",
               quantile_ms(relays, OUTBOX_RELAY_FINISH_SECONDS, &m->finish, 0.5, &bucket));
    set_number(line, "finish_p99_ms",
               quantile_ms(relays, OUTBOX_RELAY_FINISH_SECONDS, &m->finish, 0.99, &bucket));
}

/* Every writer's thread joined; the events they committed. */
static long long
join_writers(struct writer *writers)
{
    long long written = 0;

    for (int i = 0; i < WRITERS; i++) {
        pthread_join(writers[i].thread, NULL);
        written += writers[i].written;
    }
    return written;
}

static void
free_writers(struct writer *writers)
{
    for (int i = 0; i < WRITERS; i++) {
        free(writers[i].commit_at);
    }
}

/* What the writers alone reached: events/s, and PostgreSQL's CPU per event written. */
struct alone {
    double events_per_s;
    double pg_cpu_us;
};

/*
 * The writers' ceiling on this machine: the same writers, unpaced, on a
 * fresh database (migrated as the measured one is, so with the same
 * ordering), with nothing else running: no relay, no broker traffic. The
 * sustained target's 10,000 events/s can only be met with room to spare
 * above this, since the relays, nats-server and PostgreSQL's share of
 * relaying need the same two cores. The database is dropped after.
 */
static struct alone
writers_alone(PGconn *admin, const struct obx_bench_env *fresh, int sql, double seconds)
{
    struct writer writers[WRITERS];
    struct obx_bench_pg_cpu cpu;
    struct alone out;
    long long written;
    double start;

    fresh_database(admin, fresh);
    obx_bench_pg_cpu_start(&cpu, obx_bench_pg_postmaster(admin));
    start = obx_bench_now();
    start_writers(writers, fresh, sql, ALONE_ASKED_PER_S, seconds);
    written = join_writers(writers);
    out.events_per_s = (double)written / (obx_bench_now() - start);
    out.pg_cpu_us = obx_bench_pg_cpu_us_per_event(&cpu, written);
    free_writers(writers);
    obx_bench_exec(admin, "DROP DATABASE IF EXISTS " FRESH_DB " WITH (FORCE)");
    return out;
}

int
obx_bench_sustained(const struct obx_bench_env *env)
{
    const double rate = 10000, seconds = env->sustain_seconds;
    int sql = strcmp(env->writer, "sql") == 0;
    int bloated = strcmp(env->table, "bloated") == 0;
    struct writer writers[WRITERS];
    struct obx_bench_workers relays = {0};
    struct load load = {.writers = writers, .relays = &relays};
    struct obx_bench_env fresh = *env;
    struct obx_bench_ack_watch *watch;
    PGconn *admin = obx_bench_connect(env), *conn;
    struct peaks peaks = {0};
    struct measure_start measured;
    struct obx_bench_pg_cpu cpu;
    struct alone alone;
    long long written, at_end, left, wal_start, samples, finished_start;
    double start, stop, drained, ack_p50, ack_p99, pg_cpu_us;
    char *url = conninfo_for(env->database_url, FRESH_DB);
    json_t *line = json_object(), *settings = json_object();

    if (env->batch_given) {
        json_object_set_new(settings, "batch_size", json_integer(env->batch));
    }
    fresh.database_url = url;
    alone = writers_alone(admin, &fresh, sql, seconds < ALONE_SECONDS ? seconds : ALONE_SECONDS);
    fresh_database(admin, &fresh);
    conn = obx_bench_connect(&fresh);
    obx_bench_sample_by_index(conn);
    obx_bench_claim_table(conn, fresh.two_writes);
    if (obx_bench_stream_create(env->nats_url, "BENCH_SUSTAINED", "benchsus") != 0) {
        return 1;
    }
    watch = obx_bench_ack_watch_start(env->nats_url, "benchsus.>",
                                      (long long)(seconds * rate / WRITERS / PER_TX + 1) * WRITERS *
                                          PER_TX);
    start_relays(&fresh, &relays);
    if (bloated) {
        bloat(conn);
    }
    wal_start = wal_position(conn);
    relay_counts(&relays, OUTBOX_RELAY_LEASE_SECONDS, &measured.lease);
    relay_counts(&relays, OUTBOX_RELAY_FINISH_SECONDS, &measured.finish);
    finished_start = relays_finished(&relays);
    obx_bench_pg_cpu_start(&cpu, obx_bench_pg_postmaster(conn));
    start = obx_bench_now();
    start_writers(writers, &fresh, sql, rate, seconds);
    load.finished_start = finished_start;
    while (obx_bench_now() - start < seconds) {
        sample(conn, &load, &peaks);
        obx_bench_pace(obx_bench_now(), SAMPLE_MS / 1000.0);
    }
    written = join_writers(writers);
    stop = obx_bench_now();
    sample(conn, &load, &peaks);
    at_end = backlog(conn);
    /* polled on the counters, each apparent end confirmed in the table */
    for (left = at_end; left > 0 && obx_bench_now() - stop < 120;) {
        obx_bench_pace(obx_bench_now(), 0.02);
        left = load_backlog(&load) > 0 ? 1 : backlog(conn);
    }
    drained = obx_bench_now() - stop;
    pg_cpu_us = obx_bench_pg_cpu_us_per_event(&cpu, relays_finished(&relays) - finished_start);
    obx_bench_pace(obx_bench_now(), 0.2); /* the last acks' messages reach the watch */
    samples = commit_to_ack(writers, watch, &ack_p50, &ack_p99);

    json_object_set_new(line, "bench", json_string("relay"));
    json_object_set_new(line, "case", json_string("sustained"));
    json_object_set_new(line, "writer", json_string(sql ? "sql" : "c"));
    json_object_set_new(line, "table", json_string(env->table));
    json_object_set_new(line, "claim", json_string(env->two_writes ? "two_writes" : "one_write"));
    set_count(line, "relayed_before", bloated ? BLOAT_EVENTS : 0);
    json_object_set_new(line, "settings", settings);
    set_number(line, "rate", rate);
    set_number(line, "seconds", seconds);
    set_count(line, "replicas", RELAYS);
    set_count(line, "writers", WRITERS);
    set_count(line, "per_tx", PER_TX);
    set_count(line, "written", written);
    set_number(line, "write_events_per_s", (double)written / (stop - start));
    set_number(line, "writers_alone_events_per_s", alone.events_per_s);
    set_number(line, "write_vs_writers_alone",
               alone.events_per_s > 0 ? (double)written / (stop - start) / alone.events_per_s : -1);
    json_object_set_new(line, "writers_alone_pg_cpu_us_per_event",
                        obx_bench_number_or_null(alone.pg_cpu_us));
    set_count(line, "backlog_max", peaks.backlog);
    set_number(line, "backlog_max_seconds_of_production", (double)peaks.backlog / rate);
    set_count(line, "backlog_at_end", at_end);
    set_number(line, "drain_seconds", left == 0 ? drained : -1.0);
    add_latencies(line, &relays, &measured);
    set_number(line, "commit_to_ack_p50_ms", ack_p50);
    set_number(line, "commit_to_ack_p99_ms", ack_p99);
    set_count(line, "commit_to_ack_samples", samples);
    set_count(line, "dead_tuples_max", peaks.dead_tuples);
    json_object_set_new(line, "pg_cpu_us_per_event", obx_bench_number_or_null(pg_cpu_us));
    obx_bench_workers_stop(&relays);
    obx_bench_ack_watch_stop(watch);
    set_count(line, "wal_bytes_per_event",
              written > 0 ? (wal_position(conn) - wal_start) / written : -1);
    set_count(line, "bytes_per_retained_row", bytes_per_row(conn));
    set_count(line, "stream_msgs", obx_stream_message_count(env->nats_url, "BENCH_SUSTAINED"));
    obx_bench_emit(line);
    obx_bench_stream_delete(env->nats_url, "BENCH_SUSTAINED");
    obx_bench_close(conn);
    obx_bench_exec(admin, "DROP DATABASE IF EXISTS " FRESH_DB " WITH (FORCE)");
    obx_bench_close(admin);
    free_writers(writers);
    free(url);
    return 0;
}
