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
#include <pthread.h>

#include "outbox/worker.h"

struct obx_bench_env {
    const char *database_url; /* where the outbox lives (migrated) */
    const char *nats_url;     /* NULL for benches that need no broker */
    double seconds;           /* measuring time per case and round */
    int rounds;               /* cases run interleaved, median reported */
    int clients;              /* enqueue: connections writing each case at once */
    long long events;         /* events per relay/consume case */
    int events_given;         /* --events was given: the fleet's backlog uses it too */
    int batch;                /* relay lease batch / consumer fetch batch */
    int batch_given;          /* --batch was given: the sustained case uses it too */
    double sustain_seconds;   /* how long the sustained-load writers run */
    const char *writer;       /* sustained writers: "c" (outbox_enqueue_batch) or "sql" */
    const char *table;        /* sustained: "fresh" or "bloated" (relayed rows kept, no vacuum) */
    const char *only_case;    /* NULL: every case of the bench; else just this one */
    int two_writes;           /* --two-writes: the sustained case's relays claim with two writes */
    int ordering;             /* --ordering: 1 on (a new schema's default), 0 off */
};

/* One relay case: replicas, mode, and where its messages go. */
struct obx_bench_relay_case {
    int replicas;
    int prune; /* 1: prune mode, 0: mark mode */
    int batch;
    long long events;
    char stream[32];
    char prefix[32];
    double seconds;       /* filled: from the first lease to the last finish */
    long long duplicates; /* filled: acks flagged duplicate */
    long long finished;   /* filled: rows published, dead or invalid */
    int complete;         /* filled: 0 when the time limit ran out first */
    int two_writes;       /* 1: the relays claim with two writes (lease, then finish) */
    long pg_postmaster;   /* the server's postmaster here (obx_bench_pg_postmaster), 0: none */
    double pg_cpu_us;     /* filled: PostgreSQL's CPU per finished event, in us; -1 unknown */
};

/* The most interleaved rounds `--rounds` takes (enqueue keeps every sample). */
enum { OBX_BENCH_MAX_ROUNDS = 16 };

/* The most writer connections `--clients` takes. */
enum { OBX_BENCH_MAX_CLIENTS = 16 };

/*
 * Prints `line` (taking the reference) as one compact JSON line. A line
 * measured on the schema's own setting gains `ordering` (as
 * obx_bench_migrate() set it); the ordered cases' lines, which switch it
 * themselves, say their modes in their own fields.
 */
void obx_bench_emit(json_t *line);

/*
 * Migrates the outbox on `conn` and sets its ordering as `--ordering`
 * asks; exits 1 with a message on failure. Every database a bench makes
 * goes through it, so every case runs on the setting its lines report.
 */
void obx_bench_migrate(PGconn *conn, const struct obx_bench_env *env);

/* Switches the outbox's ordering on (1) or off (0); exits 1 on failure. */
void obx_bench_set_ordering(PGconn *conn, int on);

/* Seconds of a monotonic clock. */
double obx_bench_now(void);

/* Sleeps until `start` + `due_offset_s` (monotonic seconds), if that is still ahead. */
void obx_bench_pace(double start, double due_offset_s);

/* Median of `n` values (sorts them). */
double obx_bench_median(double *values, int n);

/* A connection to the benchmark database; exits 1 with a message on failure. */
PGconn *obx_bench_connect(const struct obx_bench_env *env);

/* Closes a connection from obx_bench_connect(); NULL does nothing. */
void obx_bench_close(PGconn *conn);

/* Runs one statement; exits 1 with a message on failure. */
void obx_bench_exec(PGconn *conn, const char *sql);

/* The single value of a one-row query, or -1. */
long long obx_bench_scalar(PGconn *conn, const char *sql);

/*
 * Makes `conn`'s backlog samples read the due index, as the relay does: a
 * sample is then as cheap as the backlog is short. Left to the planner, a
 * table without statistics is read whole (in mark mode, every row ever
 * relayed), several times a second, on the machine being measured.
 */
void obx_bench_sample_by_index(PGconn *conn);

/* ---- ids the bench's clients make (random_ids.c) ---- */

/* A random (v4) id as text: an aggregate's. No system call on most ids. */
void obx_bench_random_uuid(char out[37]);

/* A time-ordered (v7) id as text: a raw baseline's row, made as the C writer makes its own. */
void obx_bench_time_uuid(char out[37]);

/* ---- events (loader_pg.c) ---- */

extern const char obx_bench_payload[];

/* A fresh ~400-byte event; exits on failure. */
outbox_event *obx_bench_event(void);

/* Writes `count` (<= 1000) events in one transaction. */
void obx_bench_write_batch(PGconn *conn, int count);

/* Empties the outbox and writes `count` events. */
void obx_bench_preload(PGconn *conn, long long count);

/* Rows waiting to be published, through the claims' indexes; `first_only`: 0 or more. */
long long obx_bench_waiting(PGconn *conn, int first_only);

/* Gives the outbox the two-write claim's release's table (indexes, fillfactor), or this
 * release's (release_table_pg.c). Empties the outbox first: each case loads its own rows. */
void obx_bench_claim_table(PGconn *conn, int two_writes);

/* ---- PostgreSQL's CPU time, from /proc (pg_cpu.c) ---- */

/* What the bench reads of a /proc/<pid>/stat line; times in clock ticks. */
struct obx_bench_proc_stat {
    long pid, ppid;
    char comm[64];
    long long utime, stime;   /* the process's own */
    long long cutime, cstime; /* its children that exited and were reaped */
    long long starttime;      /* since boot */
};

/* Parses a /proc/<pid>/stat line (comm may hold spaces and ')'); 0, or -1 when malformed. */
int obx_bench_proc_stat_parse(const char *line, struct obx_bench_proc_stat *out);

/* The boot time (`btime`, Unix seconds) in /proc/stat's text, or -1. */
long long obx_bench_proc_btime(const char *proc_stat);

/*
 * The pid of the postmaster of `conn`'s server, when it runs on this
 * machine and /proc shows it; else 0, said once per run on stderr.
 */
long obx_bench_pg_postmaster(PGconn *conn);

/* CPU ticks of a postmaster, its children and its reaped children, from a start on. */
struct obx_bench_pg_cpu {
    long postmaster; /* 0: not measured */
    long long ticks; /* at the start; -1 when unreadable */
};

void obx_bench_pg_cpu_start(struct obx_bench_pg_cpu *m, long postmaster);

/* User + system CPU microseconds the server spent since the start per event; -1 when unknown. */
double obx_bench_pg_cpu_us_per_event(const struct obx_bench_pg_cpu *m, long long events);

/* `v` as a JSON number, or null when negative (unknown). */
json_t *obx_bench_number_or_null(double v);

/* ---- streams (nats_admin_nats.c) ---- */

int obx_bench_stream_create(const char *url, const char *name, const char *prefix);
void obx_bench_stream_delete(const char *url, const char *name);

/* ---- relay and consumer threads (workers.c) ---- */

enum { OBX_BENCH_MAX_WORKERS = 16 };

struct obx_bench_worker {
    outbox_relay *relay;       /* one of the two; owned */
    outbox_consumer *consumer; /* owned */
    pthread_t thread;
};

struct obx_bench_workers {
    int two_writes; /* set before obx_bench_relays_start(): its relays claim with two writes */
    int count;
    struct obx_bench_worker w[OBX_BENCH_MAX_WORKERS];
};

/*
 * A worker configuration of `kind` (OUTBOX_CONFIG_RELAY or _CONSUMER) at
 * the daemon's defaults, pointed at the bench's servers. Free it with
 * outbox_config_free(). obx_bench_set() and obx_bench_set_int() change a
 * key; a refused one ends the bench (exit 1), naming it.
 */
outbox_config *obx_bench_config(const struct obx_bench_env *env, outbox_config_kind kind);
void obx_bench_set(outbox_config *cfg, const char *key, const char *value);
void obx_bench_set_int(outbox_config *cfg, const char *key, long long value);

/*
 * A consumer's one handler: a SQL statement, an external kind (`ops`,
 * with `in_flight` runs at once; `ctx` serves one replica), or else an
 * external C callback.
 */
struct obx_handler_ops;

struct obx_bench_handler {
    const char *sql;
    const struct obx_handler_ops *ops;
    size_t in_flight;
    outbox_ext_handler_fn ext;
    void *ctx;
    void *const *ctx_each; /* non-NULL: replica i's own ctx (a handler that is not shared) */
};

/* Start `count` relays (consumers with `handler`) on threads; exit 1 on failure. */
void obx_bench_relays_start(struct obx_bench_workers *ws, const outbox_config *cfg, int count);
void obx_bench_consumers_start(struct obx_bench_workers *ws, const outbox_config *cfg, int count,
                               const struct obx_bench_handler *handler);

/* Spawns `/bin/sh -c command` and waits for it, `count` times, as fast as one thread can;
 * returns runs/s (consume_exec.c): the exec case's baseline. */
double obx_bench_spawn_rate(const char *command, int count);

/*
 * The http case's endpoint on a free loopback port (`*port`): it answers
 * every POST 204 (http_sink.c). NULL if it did not start.
 */
struct obx_bench_sink;
struct obx_bench_sink *obx_bench_sink_start(int *port);
void obx_bench_sink_stop(struct obx_bench_sink *s);

/* POSTs `body` (`body_len` bytes) with `headers` `count` times to the sink on `port`,
 * `in_flight` at once through libcurl's multi interface; returns POSTs/s
 * (raw_http_post.c): the http case's baseline. */
struct curl_slist;
double obx_bench_raw_http_post(int port, const struct curl_slist *headers, const char *body,
                               size_t body_len, int count, int in_flight);

/* Stops, joins and frees every worker. */
void obx_bench_workers_stop(struct obx_bench_workers *ws);

/* One counter (an outbox_relay_stat_id or outbox_consumer_stat_id) summed over the workers. */
enum obx_bench_kind { OBX_BENCH_RELAYS, OBX_BENCH_CONSUMERS };
unsigned long long obx_bench_total(struct obx_bench_workers *ws, enum obx_bench_kind kind, int id);

/* How far the workers got: `*started` > 0 once they took work, `*done` events finished. */
typedef void (*obx_bench_progress_fn)(struct obx_bench_workers *ws, long long *started,
                                      long long *done);

/* A timed case: events finished, and seconds from the first work taken to the last. */
struct obx_bench_run {
    long long done;
    double seconds;
    int complete; /* 0: the 300 s limit ran out first */
};

/* Polls until `target` events are finished or 300 s have passed. */
struct obx_bench_run obx_bench_run_until(struct obx_bench_workers *ws, long long target,
                                         obx_bench_progress_fn progress);

/* ---- benches ---- */

int obx_bench_enqueue(const struct obx_bench_env *env);
/* enqueue --case ordered: the writers with ordering off and on (enqueue_ordered_pg.c). */
int obx_bench_enqueue_ordered(const struct obx_bench_env *env);
int obx_bench_relay(const struct obx_bench_env *env);

/*
 * Ten databases served by one fleet relay: one with a backlog, nine at a
 * steady 100 events/s; their commit-to-ack p99 while the backlog drains,
 * and its drain rate against one plain relay on one database (fleet_pg.c).
 */
int obx_bench_fleet(const struct obx_bench_env *env);

/* The relays' max_in_flight in the rate cases, and the raw baseline's publish window. */
enum { OBX_BENCH_RELAY_WINDOW = 1024 };

/* Runs relays on the preloaded outbox until every row is finished; returns events/s
 * (relay_case.c). */
double obx_bench_relay_case(const struct obx_bench_env *env, struct obx_bench_relay_case *c);

/*
 * Empties the outbox and writes `count` events over `aggregates` aggregates
 * (0: unordered, with ordering off; else with ordering on, each event's
 * aggregate its number modulo `aggregates`), 1,000 per transaction through
 * the SQL writer (ordered_pg.c).
 */
void obx_bench_preload_aggregates(PGconn *conn, long long count, int aggregates);

/* Two relays on an unordered, a many-aggregate and a one-aggregate ordered load
 * (ordered_pg.c); emits a "ordered" line for each. */
void obx_bench_relay_ordered(const struct obx_bench_env *env, PGconn *conn);

/* Writers at a steady rate against two relays; emits the "sustained" line. */
int obx_bench_sustained(const struct obx_bench_env *env);

/* ---- consume ---- */

int obx_bench_consume(const struct obx_bench_env *env);

/* consume --case try_claim: outbox.try_claim() against the bare effect INSERT
 * (consume_try_claim_pg.c). */
void obx_bench_try_claim_case(const struct obx_bench_env *env, PGconn *conn);

/* Raw pull fetch + ack of `count` messages from `stream` (raw_fetch_nats.c). 0 or -1. */
int obx_bench_raw_fetch_ack(const char *url, const char *stream, const char *subjects,
                            long long count, double *events_per_s);

/* The benchmark's sql handler statement and its effects table (consume_handler_pg.c). */
extern const char obx_bench_handler_sql[];
void obx_bench_effects_reset(PGconn *conn);
long long obx_bench_effects_duplicated(PGconn *conn);

/* Commit-to-handled latency at a fixed rate (consume_latency_pg.c); p50/p99 in ms. */
int obx_bench_consume_latency(const struct obx_bench_env *env, PGconn *conn, int rate_per_s,
                              double seconds, double *p50_ms, double *p99_ms, long long *samples);

/* Commit-to-ack latency at a fixed rate (latency_nats.c); fills p50/p99 in ms. */
int obx_bench_relay_latency(const struct obx_bench_env *env, int rate_per_s, double seconds,
                            double *p50_ms, double *p99_ms, long long *samples);

/*
 * A subscriber noting when each message tagged {"seq":N,... (N < `slots`)
 * arrived on `subjects` (ack_watch_nats.c); exits 1 when it cannot subscribe.
 * An arrival is in obx_bench_now() seconds, 0 until seen.
 */
struct obx_bench_ack_watch;

/*
 * The writer's number in a message body ({"seq": N} in the payload; PostgreSQL's
 * text form writes "seq": N, the C writer's "seq":N), or -1 when it has none.
 */
long long obx_bench_body_seq(const char *body);
struct obx_bench_ack_watch *obx_bench_ack_watch_start(const char *url, const char *subjects,
                                                      long long slots);
double obx_bench_ack_watch_arrival(struct obx_bench_ack_watch *w, long long seq);
void obx_bench_ack_watch_stop(struct obx_bench_ack_watch *w);

#endif
