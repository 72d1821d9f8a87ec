/* SPDX-License-Identifier: MIT */
/*
 * fleet_pg.c - `outbox-bench fleet`: ten databases on the bench's server,
 * each migrated, served by one fleet relay (the daemon's code, in
 * process). Database 0 holds a backlog; databases 1-9 each get a steady
 * 100 events/s, one event per transaction. Reported: the nine's
 * commit-to-ack p50/p99 while the backlog drains, and the backlog's drain
 * rate against one plain relay draining the same backlog from a database
 * of its own, alone, in the same run: both from start to the last row
 * finished, both at the daemon's defaults.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench.h"
#include "config/config.h"
#include "fleet/fleet.h"
#include "fleet_bench.h"
#include "support/nats_auth.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { STEADY_RATE = 100 };

struct fleet_db {
    char datname[64];
    char conninfo[512];
};

struct steady_writer {
    struct obx_fleet_probe *probe;
    const char *conninfo;
    int db;
    volatile int *stop;
    long long written;
    pthread_t thread;
};

static PGconn *
connect_to(const char *conninfo)
{
    PGconn *conn = PQconnectdb(conninfo);

    if (PQstatus(conn) != CONNECTION_OK) {
        fprintf(stderr, "outbox-bench: fleet: %s", PQerrorMessage(conn));
        exit(1);
    }
    return conn;
}

/* A fresh, migrated database next to the bench's own. */
static void
make_db(const struct obx_bench_env *env, PGconn *admin, struct fleet_db *d, const char *suffix)
{
    char sql[256];
    PGconn *conn;

    snprintf(d->datname, sizeof(d->datname), "obx_fleet_bench_%s", suffix);
    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %.63s", d->datname);
    obx_bench_exec(admin, sql);
    snprintf(sql, sizeof(sql), "CREATE DATABASE %.63s", d->datname);
    obx_bench_exec(admin, sql);
    /* A URL: the fleet file's DATABASE_URL is one word. */
    if (PQhost(admin)[0] == '/') {
        snprintf(d->conninfo, sizeof(d->conninfo), "postgresql://%s@:%s/%s?host=%s", PQuser(admin),
                 PQport(admin), d->datname, PQhost(admin));
    } else {
        snprintf(d->conninfo, sizeof(d->conninfo), "postgresql://%s%s%s@%s:%s/%s", PQuser(admin),
                 PQpass(admin) && PQpass(admin)[0] ? ":" : "",
                 PQpass(admin) && PQpass(admin)[0] ? PQpass(admin) : "", PQhost(admin),
                 PQport(admin), d->datname);
    }
    conn = connect_to(d->conninfo);
    obx_bench_migrate(conn, env);
    PQfinish(conn);
}

static void
drop_db(PGconn *admin, const struct fleet_db *d)
{
    char sql[256];

    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %.63s WITH (FORCE)", d->datname);
    obx_bench_exec(admin, sql);
}

/*
 * 1 while a row waits or is leased: the first such row in the due index.
 * A count(*) of the backlog every 10 ms (a scan of every row) cost a
 * tenth of the machine the relays are measured on.
 */
static long long
unfinished(PGconn *conn)
{
    return obx_bench_waiting(conn, 1) > 0;
}

/* Polls `conn` until no row is left; returns the seconds since `start`. */
static double
wait_drained(PGconn *conn, double start)
{
    obx_bench_sample_by_index(conn);
    while (unfinished(conn) != 0) {
        if (obx_bench_now() - start > 600) {
            fprintf(stderr, "outbox-bench: fleet: the backlog did not drain in 600 s\n");
            exit(1);
        }
        obx_bench_pace(obx_bench_now(), 0.01);
    }
    return obx_bench_now() - start;
}

static void
preload(const char *conninfo, long long backlog)
{
    PGconn *conn = connect_to(conninfo);

    obx_bench_preload(conn, backlog);
    PQfinish(conn);
}

/* One plain relay on its own database: the baseline's events/s. */
static double
single_rate(const struct obx_bench_env *env, const struct fleet_db *d, long long backlog)
{
    outbox_config *cfg = obx_bench_config(env, OUTBOX_CONFIG_RELAY);
    struct obx_bench_workers ws = {0};
    PGconn *conn = connect_to(d->conninfo);
    double start, seconds;

    preload(d->conninfo, backlog);
    obx_bench_set(cfg, "database_url", d->conninfo);
    obx_bench_set(cfg, "stream", "FLEETB_SINGLE");
    obx_bench_set(cfg, "subject_prefix", "fleetbsingle");
    if (env->batch_given) {
        obx_bench_set_int(cfg, "batch_size", env->batch);
    }
    start = obx_bench_now();
    obx_bench_relays_start(&ws, cfg, 1);
    outbox_config_free(cfg);
    seconds = wait_drained(conn, start);
    obx_bench_workers_stop(&ws);
    obx_bench_stream_delete(env->nats_url, "FLEETB_SINGLE");
    PQfinish(conn);
    return (double)backlog / seconds;
}

static void *
steady_main(void *arg)
{
    struct steady_writer *w = arg;
    PGconn *conn = connect_to(w->conninfo);
    double start = obx_bench_now();
    char payload[96];
    /* Prepared once, as a service's driver does (pgx by default; psycopg 3 and pgJDBC
     * after a few executions of the same statement). */
    PGresult *prepared =
        PQprepare(conn, "steady_enqueue",
                  "SELECT outbox.enqueue('bench', gen_random_uuid(), 'tick', $1::jsonb)", 1, NULL);

    if (PQresultStatus(prepared) != PGRES_COMMAND_OK) {
        fprintf(stderr, "outbox-bench: fleet: prepare: %s", PQresultErrorMessage(prepared));
        exit(1);
    }
    PQclear(prepared);

    for (long long i = 0; !*w->stop && i < w->probe->cap; i++) {
        const char *params[] = {payload};
        PGresult *res;

        obx_bench_pace(start, (double)i / STEADY_RATE);
        snprintf(payload, sizeof(payload), "{\"steady\":1,\"db\":%d,\"seq\":%lld}", w->db, i);
        res = PQexecPrepared(conn, "steady_enqueue", 1, params, NULL, NULL, 0);
        if (PQresultStatus(res) == PGRES_TUPLES_OK) {
            double now = obx_bench_now();

            pthread_mutex_lock(&w->probe->lock);
            w->probe->commit_at[w->db][i] = now;
            pthread_mutex_unlock(&w->probe->lock);
            w->written++;
        }
        PQclear(res);
    }
    PQfinish(conn);
    return NULL;
}

static void
write_fleet_file(const char *path, const struct fleet_db *dbs)
{
    FILE *f = fopen(path, "w");

    if (f == NULL) {
        fprintf(stderr, "outbox-bench: fleet: cannot write %s\n", path);
        exit(1);
    }
    fputs("# outbox-bench fleet: database 0 floods, 1-9 steady\n", f);
    for (int i = 0; i < OBX_FLEET_BENCH_DBS; i++) {
        fprintf(f, "db%d %s stream=FLEETB_%d subject_prefix=fleetb.d%d\n", i, dbs[i].conninfo, i,
                i);
    }
    fclose(f);
}

static int
compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* Commit-to-ack of the steady events committed before `until`; missing ones are counted. */
static void
steady_latency(struct obx_fleet_probe *p, double until, double *p50, double *p99,
               long long *samples, long long *missing)
{
    double *ms = calloc((size_t)p->cap * OBX_FLEET_BENCH_DBS, sizeof(*ms));
    long long n = 0;

    *missing = 0;
    for (int db = 1; db < OBX_FLEET_BENCH_DBS; db++) {
        for (long long i = 0; i < p->cap; i++) {
            double c = p->commit_at[db][i], r = p->received_at[db][i];

            if (c == 0 || c > until) {
                continue;
            }
            if (r == 0) {
                (*missing)++;
            } else {
                ms[n++] = r > c ? (r - c) * 1000.0 : 0;
            }
        }
    }
    qsort(ms, (size_t)n, sizeof(*ms), compare_double);
    *samples = n;
    *p50 = n ? ms[n / 2] : -1;
    *p99 = n ? ms[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] : -1;
    free(ms);
}

static void *
fleet_main(void *arg)
{
    obx_fleet_run(arg);
    return NULL;
}

/* The ten databases' relays as ten plain relays, the deployment a fleet replaces. */
static void
plain_relays_start(const struct obx_bench_env *env, const struct fleet_db *dbs,
                   struct obx_bench_workers *ws)
{
    for (int i = 0; i < OBX_FLEET_BENCH_DBS; i++) {
        outbox_config *cfg = obx_bench_config(env, OUTBOX_CONFIG_RELAY);
        char stream[32], prefix[32];

        snprintf(stream, sizeof(stream), "FLEETB_%d", i);
        snprintf(prefix, sizeof(prefix), "fleetb.d%d", i);
        obx_bench_set(cfg, "database_url", dbs[i].conninfo);
        obx_bench_set(cfg, "stream", stream);
        obx_bench_set(cfg, "subject_prefix", prefix);
        if (env->batch_given) {
            obx_bench_set_int(cfg, "batch_size", env->batch);
        }
        obx_bench_relays_start(ws, cfg, 1);
        outbox_config_free(cfg);
    }
}

/*
 * The backlog drained while the nine steady writers write, through one fleet
 * (`use_fleet`) or ten plain relays; returns the drain rate. The steady
 * figures land in `probe`, reset first.
 */
static double
loaded_case(const struct obx_bench_env *env, const struct fleet_db *dbs, long long backlog,
            struct obx_fleet_probe *probe, int use_fleet, double *drain_seconds)
{
    struct obx_bench_workers ws = {0};
    struct obx_config base;
    struct obx_fleet *fleet = NULL;
    struct steady_writer w[OBX_FLEET_BENCH_DBS];
    char path[128], batch[16];
    outbox_error err = {0};
    volatile int stop = 0;
    PGconn *flooded = connect_to(dbs[0].conninfo);
    pthread_t thread;
    double start = 0;

    for (int i = 0; i < OBX_FLEET_BENCH_DBS; i++) {
        memset(probe->commit_at[i], 0, (size_t)probe->cap * sizeof(double));
        memset(probe->received_at[i], 0, (size_t)probe->cap * sizeof(double));
    }
    preload(dbs[0].conninfo, backlog);
    for (int i = 1; i < OBX_FLEET_BENCH_DBS; i++) {
        PGconn *c = connect_to(dbs[i].conninfo);

        obx_bench_exec(c, "TRUNCATE outbox.events");
        PQfinish(c);
    }
    snprintf(path, sizeof(path), "/tmp/outbox-bench-fleet-%d.conf", (int)getpid());
    write_fleet_file(path, dbs);
    snprintf(batch, sizeof(batch), "%d", env->batch);
    /* The fleet's relays sign in and verify the server as the other cases' do. */
    if (obx_config_init(&base, OBX_FOR_ALL, &err) != OUTBOX_OK ||
        obx_nats_auth_load_env(&base, &err) != OUTBOX_OK) {
        fprintf(stderr, "outbox-bench: fleet: %s\n", err.message);
        exit(1);
    }
    if (!use_fleet) {
        start = obx_bench_now();
        plain_relays_start(env, dbs, &ws);
    } else if (obx_config_set_key(&base, "nats_url", env->nats_url, &err) != OUTBOX_OK ||
               obx_config_set_key(&base, "fleet_file", path, &err) != OUTBOX_OK ||
               (env->batch_given &&
                obx_config_set_key(&base, "batch_size", batch, &err) != OUTBOX_OK) ||
               obx_fleet_new(&base, &fleet, &err) != OUTBOX_OK) {
        fprintf(stderr, "outbox-bench: fleet: %s\n", err.message);
        exit(1);
    } else {
        start = obx_bench_now();
        pthread_create(&thread, NULL, fleet_main, fleet);
        /* The steady writers start once every database has its owner, so their figures
         * are the relays' at work, not the fleet's start-up. */
        for (size_t members = 0, owned = 0; owned < OBX_FLEET_BENCH_DBS;) {
            obx_bench_pace(obx_bench_now(), 0.005);
            obx_fleet_counts(fleet, &members, &owned);
        }
    }
    for (int i = 1; i < OBX_FLEET_BENCH_DBS; i++) {
        w[i] = (struct steady_writer){
            .probe = probe, .conninfo = dbs[i].conninfo, .db = i, .stop = &stop};
        pthread_create(&w[i].thread, NULL, steady_main, &w[i]);
    }
    *drain_seconds = wait_drained(flooded, start);
    stop = 1;
    for (int i = 1; i < OBX_FLEET_BENCH_DBS; i++) {
        pthread_join(w[i].thread, NULL);
    }
    obx_bench_pace(obx_bench_now(), 2.0); /* the last steady acks */
    if (use_fleet) {
        obx_fleet_stop(fleet);
        pthread_join(thread, NULL);
        obx_fleet_free(fleet);
    } else {
        obx_bench_workers_stop(&ws);
    }
    obx_config_fini(&base);
    unlink(path);
    PQfinish(flooded);
    for (int i = 0; i < OBX_FLEET_BENCH_DBS; i++) {
        char stream[32];

        snprintf(stream, sizeof(stream), "FLEETB_%d", i);
        obx_bench_stream_delete(env->nats_url, stream);
    }
    return (double)backlog / *drain_seconds;
}

int
obx_bench_fleet(const struct obx_bench_env *env)
{
    long long backlog = env->events_given ? env->events : 100000;
    struct fleet_db dbs[OBX_FLEET_BENCH_DBS], single;
    struct obx_fleet_probe probe = {.cap = 0};
    PGconn *admin = obx_bench_connect(env);
    double single_eps, plain_eps = 0;

    obx_bench_exec(admin, "SET client_min_messages = warning");
    for (int i = 0; i < OBX_FLEET_BENCH_DBS; i++) {
        char suffix[8];

        snprintf(suffix, sizeof(suffix), "%d", i);
        make_db(env, admin, &dbs[i], suffix);
    }
    make_db(env, admin, &single, "single");
    fprintf(stderr, "outbox-bench: fleet: single-database baseline, %lld events\n", backlog);
    single_eps = single_rate(env, &single, backlog);

    probe.cap = 600 * STEADY_RATE; /* room for a 10-minute drain */
    pthread_mutex_init(&probe.lock, NULL);
    for (int i = 0; i < OBX_FLEET_BENCH_DBS; i++) {
        probe.commit_at[i] = calloc((size_t)probe.cap, sizeof(double));
        probe.received_at[i] = calloc((size_t)probe.cap, sizeof(double));
    }
    if (obx_fleet_probe_start(&probe, env->nats_url, "fleetb.>") != 0) {
        fprintf(stderr, "outbox-bench: fleet: cannot subscribe\n");
        return 1;
    }
    for (int use_fleet = 0; use_fleet <= 1; use_fleet++) {
        double eps, drain_s, p50, p99;
        long long samples, missing;
        json_t *line;

        fprintf(stderr,
                "outbox-bench: fleet: 10 databases through %s, %lld-event backlog in one, %d/s "
                "in nine\n",
                use_fleet ? "one fleet relay" : "ten plain relays", backlog, STEADY_RATE);
        eps = loaded_case(env, dbs, backlog, &probe, use_fleet, &drain_s);
        steady_latency(&probe, obx_bench_now(), &p50, &p99, &samples, &missing);
        if (!use_fleet) {
            plain_eps = eps;
        }
        line = json_pack(
            "{s:s, s:s, s:i, s:I, s:i, s:f, s:f, s:f, s:I, s:I, s:f, s:f, s:f, "
            "s:f, s:i, s:f}",
            "bench", "fleet", "case", use_fleet ? "fleet" : "ten_plain_relays", "databases",
            OBX_FLEET_BENCH_DBS, "backlog", (json_int_t)backlog, "steady_rate_per_database",
            STEADY_RATE, "drain_seconds", drain_s, "steady_p50_ms", p50, "steady_p99_ms", p99,
            "steady_samples", (json_int_t)samples, "steady_missing", (json_int_t)missing,
            "flooded_events_per_s", eps, "single_relay_events_per_s", single_eps, "drain_ratio",
            single_eps > 0 ? eps / single_eps : 0, "drain_ratio_vs_ten_plain_relays",
            plain_eps > 0 ? eps / plain_eps : 0, "target_p99_ms", 50, "target_drain_ratio", 0.8);
        obx_bench_emit(line);
    }
    obx_fleet_probe_stop(&probe);

    for (int i = 0; i < OBX_FLEET_BENCH_DBS; i++) {
        drop_db(admin, &dbs[i]);
        free(probe.commit_at[i]);
        free(probe.received_at[i]);
    }
    drop_db(admin, &single);
    pthread_mutex_destroy(&probe.lock);
    obx_bench_close(admin);
    return 0;
}
