/* SPDX-License-Identifier: MIT */
/*
 * consume_bench.c - `outbox-bench consume`: handled events per second for
 * a SQL handler (in the ledger transaction) with 1, 2 and 4 replicas on
 * JetStream and on the DB backend, against the raw JetStream pull
 * fetch+ack rate of the same messages measured in the same run; an
 * `exec:true` handler against spawning `true` bare in a loop; an `http:`
 * handler against the same POSTs sent raw through libcurl to the same
 * local endpoint; outbox.try_claim() in a consumer's own transaction
 * against its effect alone; then publish-to-handled latency at a fixed moderate
 * rate. `--case ordered`: the consumers' order check over 10,000 aggregates
 * and over one hot aggregate, beside the same drain unordered.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "audit/stream_audit.h"
#include "bench/bench.h"
#include "envelope/envelope.h"
#include "handlers/exec_handler.h"
#include "handlers/http_handler.h"

#include "common/banned.h" /* last: poisons unsafe functions */

struct consume_case {
    outbox_bus_kind bus;
    int replicas;
    int batch; /* fetch / lease size, at most 1000 */
    const char *stream, *prefix;
    const struct obx_bench_handler *handler; /* NULL: the SQL handler */
    const char *label;                       /* the handler, for the output; NULL: "sql" */
    long long events;
    double seconds;     /* filled: first fetch to last handled */
    long long finished; /* filled: events handled */
    int complete;       /* filled: 0 when the time limit ran out first */
    long pg_postmaster; /* the server's postmaster, to count its CPU; 0: not counted */
    double pg_cpu_us;   /* filled: PostgreSQL's CPU per handled event (us); -1 unknown */
    double own_cpu_us;  /* filled: this process's CPU (the consumers) per handled event (us) */
};

/* This process's CPU time so far, in microseconds. */
static double
own_cpu_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void
consumer_progress(struct obx_bench_workers *ws, long long *started, long long *done)
{
    *started = (long long)obx_bench_total(ws, OBX_BENCH_CONSUMERS, OUTBOX_CONSUMER_FETCHED);
    *done = (long long)obx_bench_total(ws, OBX_BENCH_CONSUMERS, OUTBOX_CONSUMER_HANDLED);
}

/* From the first fetch until every event is handled; returns events/s. */
static double
run_consumers(const struct obx_bench_env *env, struct consume_case *c)
{
    struct obx_bench_workers ws = {0};
    outbox_config *cfg = obx_bench_config(env, OUTBOX_CONFIG_CONSUMER);
    struct obx_bench_run run;
    struct obx_bench_pg_cpu cpu;
    double own;

    obx_bench_set(cfg, "bus", c->bus == OUTBOX_BUS_DB ? "db" : "jetstream");
    obx_bench_set(cfg, "stream", c->stream);
    obx_bench_set(cfg, "subject_prefix", c->prefix);
    obx_bench_set(cfg, "consumer_name", "bench");
    obx_bench_set_int(cfg, "batch_size", c->batch);
    obx_bench_set_int(cfg, "poll_max_ms", 200);
    obx_bench_consumers_start(&ws, cfg, c->replicas,
                              c->handler != NULL
                                  ? c->handler
                                  : &(struct obx_bench_handler){.sql = obx_bench_handler_sql});
    outbox_config_free(cfg);
    obx_bench_pg_cpu_start(&cpu, c->pg_postmaster);
    own = own_cpu_us();
    run = obx_bench_run_until(&ws, c->events, consumer_progress);
    c->pg_cpu_us = obx_bench_pg_cpu_us_per_event(&cpu, run.done);
    c->own_cpu_us = run.done > 0 ? (own_cpu_us() - own) / (double)run.done : -1;
    c->seconds = run.seconds;
    c->finished = run.done;
    c->complete = run.complete;
    obx_bench_workers_stop(&ws);
    return run.seconds > 0 ? (double)run.done / run.seconds : 0;
}

/*
 * The case's handler as one that ran all along: its order baseline taken
 * before the case's events are written, over no earlier aggregate. Left to
 * the consumers' registration, the first case's baseline copied a progress
 * row for each of the preload's 20,000 aggregates inside the measured drain
 * (about 10 us of PostgreSQL's CPU an event), and its done marks then found
 * those rows made, where every later case's made them.
 */
static void
order_state_reset(PGconn *conn, const struct consume_case *c)
{
    obx_bench_exec(conn, "TRUNCATE outbox.handler_progress, outbox.handler_baselines, "
                         "outbox.parked_events, outbox.aggregate_heads");
    obx_bench_exec(conn, c->handler != NULL ? "SELECT outbox.ledger_order_baseline('bench_ext')"
                                            : "SELECT outbox.ledger_order_baseline('bench_sql')");
}

/* Loads the outbox and publishes it all with a relay (not timed). */
static void
publish_all(const struct obx_bench_env *env, PGconn *conn, struct consume_case *c)
{
    struct obx_bench_relay_case rc = {.replicas = 2, .batch = 500, .events = c->events};

    order_state_reset(conn, c);
    obx_bench_preload(conn, c->events);
    snprintf(rc.stream, sizeof(rc.stream), "%s", c->stream);
    snprintf(rc.prefix, sizeof(rc.prefix), "%s", c->prefix);
    if (obx_bench_stream_create(env->nats_url, c->stream, c->prefix) != 0) {
        exit(1);
    }
    obx_bench_relay_case(env, &rc);
}

/* `dups` < 0: not counted (an exec: handler leaves no effect rows to count). */
static void
emit(const struct consume_case *c, const char *name, double rate, double raw, long long dups)
{
    const char *handler = c->label != NULL ? c->label : "sql";
    json_t *line =
        json_pack("{s:s, s:s, s:i, s:i, s:I, s:f, s:f, s:s, s:I, s:b}", "bench", "consume", "case",
                  name, "replicas", c->replicas, "batch", c->batch, "events", (json_int_t)c->events,
                  "events_per_s", rate, "seconds", c->seconds, "handler", handler, "finished",
                  (json_int_t)c->finished, "complete", c->complete);

    if (dups >= 0) {
        json_object_set_new(line, "effects_duplicated", json_integer(dups));
    }
    if (raw > 0) {
        json_object_set_new(line, "ratio_to_raw", json_real(rate / raw));
    }
    json_object_set_new(line, "pg_cpu_us_per_event", obx_bench_number_or_null(c->pg_cpu_us));
    json_object_set_new(line, "consumer_cpu_us_per_event", obx_bench_number_or_null(c->own_cpu_us));
    obx_bench_emit(line);
}

/* The JetStream cases; returns the raw fetch+ack rate measured on the first stream. */
static double
jetstream_cases(const struct obx_bench_env *env, PGconn *conn)
{
    static const int replicas[] = {1, 2, 4};
    double raw = 0;

    for (size_t i = 0; i < sizeof(replicas) / sizeof(replicas[0]); i++) {
        struct consume_case c = {.bus = OUTBOX_BUS_JETSTREAM,
                                 .replicas = replicas[i],
                                 .stream = "BENCH_CONSUME",
                                 .prefix = "benchcons",
                                 .batch = env->batch > 1000 ? 1000 : env->batch,
                                 .events = env->events};
        double rate;

        obx_bench_effects_reset(conn);
        publish_all(env, conn, &c);
        if (i == 0 &&
            obx_bench_raw_fetch_ack(env->nats_url, c.stream, "benchcons.>", c.events, &raw) == 0) {
            obx_bench_emit(json_pack("{s:s, s:s, s:f, s:I, s:i}", "bench", "consume", "case",
                                     "raw_fetch_ack", "events_per_s", raw, "events",
                                     (json_int_t)c.events, "fetch_batch", 256));
        }
        rate = run_consumers(env, &c);
        emit(&c, "consume_jetstream", rate, raw, obx_bench_effects_duplicated(conn));
        obx_bench_stream_delete(env->nats_url, c.stream);
    }
    return raw;
}

/*
 * A declared `exec:true` handler (8 children in flight, its default), one
 * replica, against the same command spawned and waited for in a loop with
 * no pgoutbox: what the handler adds to a process start. Fewer events
 * than the SQL cases: each is a fork.
 */
static void
exec_case(const struct obx_bench_env *env, PGconn *conn)
{
    struct obx_exec_handler command = {.command = "true", .timeout_ms = 30000};
    struct obx_bench_handler exec = {.ops = &obx_exec_kind, .in_flight = 8, .ctx = &command};
    struct consume_case c = {.bus = OUTBOX_BUS_JETSTREAM,
                             .replicas = 1,
                             .stream = "BENCH_CONSUME_EXEC",
                             .prefix = "benchexec",
                             .handler = &exec,
                             .label = "exec:true",
                             .batch = env->batch > 1000 ? 1000 : env->batch,
                             .events = env->events < 3000 ? env->events : 3000};
    double bare = obx_bench_spawn_rate(command.command, (int)c.events), rate;

    obx_bench_emit(json_pack("{s:s, s:s, s:s, s:f, s:I}", "bench", "consume", "case", "raw_spawn",
                             "command", command.command, "events_per_s", bare, "events",
                             (json_int_t)c.events));
    publish_all(env, conn, &c);
    rate = run_consumers(env, &c);
    emit(&c, "consume_exec", rate, bare, -1);
    obx_exec_handler_fini(&command);
    obx_bench_stream_delete(env->nats_url, c.stream);
}

/* Effects handled in another order than their aggregate's numbers (0 when ordered right). */
static long long
effects_out_of_order(PGconn *conn)
{
    return obx_bench_scalar(conn, "SELECT count(*) FROM (SELECT e.aggregate_seq, row_number() "
                                  "OVER (PARTITION BY e.aggregate_type, e.aggregate_id ORDER BY "
                                  "f.handled_at, e.aggregate_seq) AS k FROM bench_effects f JOIN "
                                  "outbox.events e ON e.id = f.event_id WHERE e.aggregate_seq IS "
                                  "NOT NULL) AS x WHERE x.aggregate_seq <> x.k");
}

/* Events parked so far (every insert into parked_events, removed or not). */
static long long
parked_ever(PGconn *conn)
{
    obx_bench_exec(conn, "SELECT pg_stat_clear_snapshot()");
    return obx_bench_scalar(conn, "SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables "
                                  "WHERE relid = 'outbox.parked_events'::regclass");
}

/*
 * Two replicas of the SQL handler on JetStream drain a load of `aggregates`
 * (0: unordered), published beforehand by two relays (not timed). The
 * handler's order starts before the load (its baseline taken first), as
 * for a handler running while the events were written, so every ordered
 * event is checked. Returns events/s.
 */
static double
ordered_drain(const struct obx_bench_env *env, PGconn *conn, int aggregates, double unordered,
              int round)
{
    struct consume_case c = {.bus = OUTBOX_BUS_JETSTREAM,
                             .replicas = 2,
                             .stream = "BENCH_CONSUME_ORDERED",
                             .prefix = "benchcord",
                             .batch = env->batch > 1000 ? 1000 : env->batch,
                             .events = env->events,
                             .pg_postmaster = obx_bench_pg_postmaster(conn)};
    struct obx_bench_relay_case rc = {.replicas = 2, .batch = 500, .events = env->events};
    json_t *line;
    double rate;
    long long parked_before;

    obx_bench_effects_reset(conn);
    obx_bench_exec(conn, "TRUNCATE outbox.handler_progress, outbox.handler_baselines, "
                         "outbox.parked_events");
    obx_bench_preload_aggregates(conn, c.events, aggregates);
    obx_bench_exec(conn, "SELECT outbox.ledger_order_baseline('bench_sql')");
    snprintf(rc.stream, sizeof(rc.stream), "%s", c.stream);
    snprintf(rc.prefix, sizeof(rc.prefix), "%s", c.prefix);
    if (obx_bench_stream_create(env->nats_url, c.stream, c.prefix) != 0) {
        exit(1);
    }
    obx_bench_relay_case(env, &rc);
    parked_before = parked_ever(conn);
    rate = run_consumers(env, &c);
    line =
        json_pack("{s:s, s:s, s:i, s:i, s:I, s:f, s:f, s:I, s:b, s:I, s:I, s:I}", "bench",
                  "consume", "case", "consume_ordered", "aggregates", aggregates, "replicas",
                  c.replicas, "events", (json_int_t)c.events, "events_per_s", rate, "seconds",
                  c.seconds, "finished", (json_int_t)c.finished, "complete", c.complete,
                  "effects_duplicated", (json_int_t)obx_bench_effects_duplicated(conn),
                  "effects_out_of_order", (json_int_t)effects_out_of_order(conn), "parked",
                  (json_int_t)obx_bench_scalar(conn, "SELECT count(*) FROM outbox.parked_events"));
    json_object_set_new(line, "ratio_to_unordered",
                        unordered > 0 && aggregates > 0 ? json_real(rate / unordered)
                                                        : json_null());
    json_object_set_new(line, "round", json_integer(round));
    json_object_set_new(line, "pg_cpu_us_per_event", obx_bench_number_or_null(c.pg_cpu_us));
    json_object_set_new(line, "consumer_cpu_us_per_event", obx_bench_number_or_null(c.own_cpu_us));
    /* how much of the drain went through parking: the consumers' sessions
     * have ended, so their counts are in the statistics */
    json_object_set_new(line, "parked_during_drain",
                        json_integer(parked_ever(conn) - parked_before));
    obx_bench_emit(line);
    obx_bench_stream_delete(env->nats_url, c.stream);
    return rate;
}

/*
 * --case ordered: unordered, 10,000 aggregates, one hot aggregate, in one
 * run, `--rounds` times interleaved. A drain's rate moves by a fifth
 * between drains minutes apart (the unordered one most), so one ratio says
 * little: each round's lines are printed, then per load the median rate
 * and its ratio to the median unordered rate, with the rounds' own ratios'
 * range beside it.
 */
static void
ordered_cases(const struct obx_bench_env *env, PGconn *conn)
{
    static const int loads[] = {0, 10000, 1};
    enum { LOADS = sizeof(loads) / sizeof(loads[0]) };
    double rate[LOADS][OBX_BENCH_MAX_ROUNDS], ratio[LOADS][OBX_BENCH_MAX_ROUNDS], med[LOADS];
    int rounds = env->rounds;

    for (int r = 0; r < rounds; r++) {
        for (int l = 0; l < LOADS; l++) {
            rate[l][r] = ordered_drain(env, conn, loads[l], l == 0 ? 0 : rate[0][r], r + 1);
            ratio[l][r] = rate[0][r] > 0 ? rate[l][r] / rate[0][r] : 0;
        }
    }
    for (int l = 0; l < LOADS; l++) {
        double lo = ratio[l][0], hi = ratio[l][0];
        json_t *line;

        for (int r = 1; r < rounds; r++) {
            lo = ratio[l][r] < lo ? ratio[l][r] : lo;
            hi = ratio[l][r] > hi ? ratio[l][r] : hi;
        }
        med[l] = obx_bench_median(rate[l], rounds); /* sorts rate[l]: the ratios are taken */
        line = json_pack("{s:s, s:s, s:i, s:i, s:f}", "bench", "consume", "case",
                         "consume_ordered_median", "aggregates", loads[l], "rounds", rounds,
                         "events_per_s", med[l]);
        if (l > 0) {
            json_object_set_new(line, "ratio_to_unordered",
                                json_real(med[0] > 0 ? med[l] / med[0] : 0));
            json_object_set_new(line, "round_ratio_min", json_real(lo));
            json_object_set_new(line, "round_ratio_max", json_real(hi));
        }
        obx_bench_emit(line);
    }
    obx_bench_set_ordering(conn, env->ordering);
}

/*
 * The raw POSTs' request: what handler `h` sends for an event like the
 * case's (the bench's payload, one aggregate's first number when the
 * schema is ordered), headers and body, made by the handler itself.
 */
static void
raw_request(const struct obx_http_handler *h, int ordered, struct curl_slist **headers,
            struct obx_buf *body)
{
    char id[37], aggregate_id[37];
    struct obx_envelope_fields f = {.head = {.id = id,
                                             .event_type = "review.logged",
                                             .aggregate_type = "movie",
                                             .aggregate_id = aggregate_id,
                                             .occurred_at = "2026-11-29T09:41:56.123456Z",
                                             .aggregate_seq = ordered ? 1 : 0},
                                    .payload_json = obx_bench_payload,
                                    .payload_len = strlen(obx_bench_payload)};
    struct obx_buf envelope;

    obx_bench_random_uuid(id);
    obx_bench_random_uuid(aggregate_id);
    obx_buf_init(&envelope);
    obx_envelope_serialize(&f, &envelope);
    if (obx_buf_failed(&envelope) ||
        obx_http_handler_request(h, &f.head, envelope.data, envelope.len, headers, body) != 0) {
        fprintf(stderr, "outbox-bench: the http case cannot build its raw request\n");
        exit(1);
    }
    obx_buf_fini(&envelope);
}

/* One raw_http_post run: its rate, and this process's CPU per POST (the POSTs' and the endpoint's).
 */
struct raw_post {
    double rate, cpu_us;
};

static void
raw_post(int port, struct curl_slist *headers, const struct obx_buf *body, long long events,
         int in_flight, struct raw_post *out)
{
    double cpu = own_cpu_us();

    out->rate =
        obx_bench_raw_http_post(port, headers, body->data, body->len, (int)events, in_flight);
    out->cpu_us = (own_cpu_us() - cpu) / (double)events;
}

/*
 * A declared `http:` handler (OBX_HTTP_DEFAULT_IN_FLIGHT requests in
 * flight, its default) POSTing to a local endpoint that answers 204, on one
 * replica and on HTTP_REPLICAS (each its own handler, as each daemon has),
 * each against the same endpoint sent the same number of POSTs in flight
 * through libcurl with no pgoutbox (raw_http_post), just before and just
 * after: the baseline is their mean, as the relay's raw publish is, since
 * one half-second sample of it varies by half from run to run here.
 */
enum { HTTP_REPLICAS = 2 };

static void
http_case(const struct obx_bench_env *env, PGconn *conn)
{
    struct obx_http_handler *hh[HTTP_REPLICAS] = {NULL};
    struct obx_bench_sink *sink;
    struct consume_case c = {.bus = OUTBOX_BUS_JETSTREAM,
                             .replicas = 1,
                             .stream = "BENCH_CONSUME_HTTP",
                             .prefix = "benchhttp",
                             .label = "http",
                             .pg_postmaster = obx_bench_pg_postmaster(conn),
                             .batch = env->batch > 1000 ? 1000 : env->batch,
                             .events = env->events < 20000 ? env->events : 20000};
    struct obx_bench_handler http = {.ops = &obx_http_kind,
                                     .in_flight = OBX_HTTP_DEFAULT_IN_FLIGHT};
    outbox_error err;
    double rate;
    char url[64];
    int port = 0;
    struct curl_slist *raw_headers = NULL;
    struct obx_buf raw_body;

    obx_buf_init(&raw_body);
    sink = obx_bench_sink_start(&port);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/events", port);
    for (int i = 0; i < HTTP_REPLICAS; i++) {
        if (sink == NULL || obx_http_handler_new(
                                &(struct obx_http_handler_config){.name = "bench_ext",
                                                                  .url = url,
                                                                  .timeout_ms = 30000,
                                                                  .ce_source = "pgoutbox",
                                                                  .backoff_base_ms = 200,
                                                                  .backoff_cap_ms = 2000,
                                                                  .in_flight = (int)http.in_flight},
                                &hh[i], &err) != OUTBOX_OK) {
            fprintf(stderr, "outbox-bench: the http case cannot start: %s\n",
                    sink == NULL ? "no local endpoint" : err.message);
            exit(1);
        }
    }
    http.ctx_each = (void *const *)hh;
    c.handler = &http;
    raw_request(hh[0], env->ordering, &raw_headers, &raw_body);
    for (int replicas = 1; replicas <= HTTP_REPLICAS; replicas++) {
        /* the baseline keeps as many POSTs in flight as the replicas together */
        int in_flight = replicas * (int)http.in_flight;
        struct raw_post before, after;

        raw_post(port, raw_headers, &raw_body, c.events, in_flight, &before);
        c.replicas = replicas;
        publish_all(env, conn, &c);
        rate = run_consumers(env, &c);
        raw_post(port, raw_headers, &raw_body, c.events, in_flight, &after);
        obx_bench_emit(json_pack("{s:s, s:s, s:f, s:f, s:f, s:I, s:i, s:f}", "bench", "consume",
                                 "case", "raw_http_post", "events_per_s",
                                 (before.rate + after.rate) / 2, "before", before.rate, "after",
                                 after.rate, "events", (json_int_t)c.events, "in_flight", in_flight,
                                 "process_cpu_us_per_event", (before.cpu_us + after.cpu_us) / 2));
        emit(&c, "consume_http", rate, (before.rate + after.rate) / 2, -1);
        obx_bench_stream_delete(env->nats_url, c.stream);
    }
    for (int i = 0; i < HTTP_REPLICAS; i++) {
        obx_http_handler_free(hh[i]);
    }
    curl_slist_free_all(raw_headers);
    obx_buf_fini(&raw_body);
    obx_bench_sink_stop(sink);
}

static void
db_cases(const struct obx_bench_env *env, PGconn *conn)
{
    static const int replicas[] = {1, 2, 4};

    for (size_t i = 0; i < sizeof(replicas) / sizeof(replicas[0]); i++) {
        struct consume_case c = {.bus = OUTBOX_BUS_DB,
                                 .replicas = replicas[i],
                                 .events = env->events,
                                 .batch = env->batch > 1000 ? 1000 : env->batch,
                                 .stream = "-",
                                 .prefix = "events"};
        double rate;

        obx_bench_effects_reset(conn);
        obx_bench_preload(conn, c.events);
        rate = run_consumers(env, &c);
        emit(&c, "consume_db", rate, 0, obx_bench_effects_duplicated(conn));
    }
}

int
obx_bench_consume(const struct obx_bench_env *env)
{
    PGconn *conn = obx_bench_connect(env);
    double p50, p99;
    long long samples;

    if (env->only_case != NULL &&
        (strcmp(env->only_case, "exec") == 0 || strcmp(env->only_case, "http") == 0 ||
         strcmp(env->only_case, "try_claim") == 0 || strcmp(env->only_case, "ordered") == 0)) {
        /* --case exec / http / try_claim / ordered: that case alone (with its baseline) */
        if (strcmp(env->only_case, "exec") == 0) {
            exec_case(env, conn);
        } else if (strcmp(env->only_case, "http") == 0) {
            http_case(env, conn);
        } else if (strcmp(env->only_case, "try_claim") == 0) {
            obx_bench_try_claim_case(env, conn);
        } else {
            ordered_cases(env, conn);
        }
        obx_bench_close(conn);
        return 0;
    }
    jetstream_cases(env, conn);
    exec_case(env, conn);
    http_case(env, conn);
    obx_bench_try_claim_case(env, conn);
    db_cases(env, conn);
    obx_bench_effects_reset(conn);
    if (obx_bench_consume_latency(env, conn, 1000, env->seconds * 3, &p50, &p99, &samples) == 0) {
        obx_bench_emit(json_pack("{s:s, s:s, s:i, s:f, s:f, s:I, s:i}", "bench", "consume", "case",
                                 "latency", "rate", 1000, "p50_ms", p50, "p99_ms", p99, "samples",
                                 (json_int_t)samples, "replicas", 1));
    }
    obx_bench_effects_reset(conn);
    obx_bench_close(conn);
    return 0;
}
