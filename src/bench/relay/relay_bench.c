/* SPDX-License-Identifier: MIT */
/*
 * relay_bench.c - `outbox-bench relay`: the relay's end-to-end rate (rows
 * committed -> acked and finished) with 1, 2 and 4 replicas in both modes,
 * against the raw JetStream publish rate of the same messages measured in
 * the same run, and PostgreSQL's CPU per event against the two-write
 * claim (lease, then finish) measured beside it; then commit-to-ack
 * latency at a fixed moderate rate, and the sustained-load case (relays
 * keeping up with busy writers).
 *
 * Replicas are threads here, each with its own database and NATS
 * connections, exactly as separate processes would have.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/stream_audit.h"
#include "bench/bench.h"
#include "bus/raw_publish.h"
#include "config/config.h"
#include "outbox/worker.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static double
raw_rate(const struct obx_bench_env *env, long long events, size_t body_bytes)
{
    outbox_error err = {0};
    double rate = 0;

    if (obx_bench_stream_create(env->nats_url, "BENCH_RAW", "benchraw") != 0 ||
        obx_raw_publish_rate(env->nats_url, "BENCH_RAW", "benchraw", (size_t)events, body_bytes,
                             OBX_BENCH_RELAY_WINDOW, &rate, &err) != OUTBOX_OK) {
        fprintf(stderr, "outbox-bench: raw publish failed: %s\n", err.message);
        exit(1);
    }
    obx_bench_stream_delete(env->nats_url, "BENCH_RAW");
    return rate;
}

/* Bytes of a stored envelope as the relay publishes it (PostgreSQL's text form). */
static size_t
published_body_bytes(PGconn *conn)
{
    long long n = obx_bench_scalar(conn, "SELECT octet_length(envelope::text) FROM outbox.events "
                                         "LIMIT 1");

    return n > 0 ? (size_t)n : 470;
}

/* The tuning settings a case runs with that differ from the daemon's defaults. */
static json_t *
changed_settings(int batch, int prune)
{
    outbox_config *defaults = outbox_config_new(OUTBOX_CONFIG_RELAY);
    json_t *changed = json_object();

    if (defaults == NULL || changed == NULL) {
        fprintf(stderr, "outbox-bench: out of memory\n");
        exit(1);
    }
    if (batch != obx_batch_size(&defaults->values, OBX_FOR_RELAY)) {
        json_object_set_new(changed, "batch_size", json_integer(batch));
    }
    if (OBX_BENCH_RELAY_WINDOW != defaults->values.max_in_flight) {
        json_object_set_new(changed, "max_in_flight", json_integer(OBX_BENCH_RELAY_WINDOW));
    }
    if (prune) {
        json_object_set_new(changed, "relay_mode", json_string("prune"));
    }
    outbox_config_free(defaults);
    return changed;
}

static const char *
claim_name(int two_writes)
{
    return two_writes ? "two_writes" : "one_write";
}

/* a / b, or null when either is unknown (negative) or b is 0. */
static json_t *
ratio(double a, double b)
{
    return a >= 0 && b > 0 ? json_real(a / b) : json_null();
}

/*
 * A rate case's line. `two` is the same (mode, replicas) run with the
 * two-write claim, compared against on a one-write line (NULL: none).
 */
static void
emit_case(const struct obx_bench_relay_case *c, double rate, double raw, long long stream_msgs,
          const struct obx_bench_relay_case *two, double two_rate)
{
    json_t *line = json_pack(
        "{s:s, s:s, s:o, s:s, s:s, s:i, s:i, s:I, s:f, s:f, s:o, s:I, s:I, s:f, s:I, s:b}", "bench",
        "relay", "case", "relay", "settings", changed_settings(c->batch, c->prune), "mode",
        c->prune ? "prune" : "mark", "claim", claim_name(c->two_writes), "replicas", c->replicas,
        "batch", c->batch, "events", (json_int_t)c->events, "events_per_s", rate, "ratio_to_raw",
        rate / raw, "pg_cpu_us_per_event", obx_bench_number_or_null(c->pg_cpu_us), "stream_msgs",
        (json_int_t)stream_msgs, "duplicates_acked", (json_int_t)c->duplicates, "seconds",
        c->seconds, "finished", (json_int_t)c->finished, "complete", c->complete);

    if (line != NULL && two != NULL) {
        json_object_set_new(line, "pg_cpu_vs_two_writes", ratio(c->pg_cpu_us, two->pg_cpu_us));
        json_object_set_new(line, "rate_vs_two_writes", ratio(rate, two_rate));
    }
    obx_bench_emit(line);
}

/* One relay case on a fresh stream and a freshly loaded outbox; returns its rate. */
static double
measure_case(const struct obx_bench_env *env, PGconn *conn, struct obx_bench_relay_case *c,
             long long *stream_msgs)
{
    double rate;

    snprintf(c->stream, sizeof(c->stream), "BENCH_%s_%d%s", c->prune ? "PRUNE" : "MARK",
             c->replicas, c->two_writes ? "_TWO" : "");
    snprintf(c->prefix, sizeof(c->prefix), "bench%s%d%s", c->prune ? "p" : "m", c->replicas,
             c->two_writes ? "t" : "");
    obx_bench_claim_table(conn, c->two_writes);
    obx_bench_preload(conn, c->events);
    if (obx_bench_stream_create(env->nats_url, c->stream, c->prefix) != 0) {
        exit(1);
    }
    rate = obx_bench_relay_case(env, c);
    *stream_msgs = obx_stream_message_count(env->nats_url, c->stream);
    obx_bench_stream_delete(env->nats_url, c->stream);
    return rate;
}

/*
 * The rate cases: 1, 2 and 4 replicas in both modes, each with the
 * one-write claim and again with the two-write one, between two raw
 * baselines. Every (mode, replicas) is compared, not only the default
 * settings' 1 and 2 replicas: at the default --events the six more cases
 * (each a preload and a drain) add ~30 s to a run of ~30 s on the 2-core
 * machine, which is affordable, and a comparison is only as good as its
 * neighbours in time. A pair runs back to back, which claim goes first
 * alternating, so a drift of the machine does not favour one claim.
 */
static void
rate_cases(const struct obx_bench_env *env, PGconn *conn)
{
    enum { REPLICA_CASES = 3, PAIRS = 2 * REPLICA_CASES, CASES = 2 * PAIRS };
    static const int replicas[REPLICA_CASES] = {1, 2, 4};
    struct obx_bench_relay_case cases[CASES]; /* [2k]: one write, [2k + 1]: two writes */
    double rates[CASES];
    long long stream_msgs[CASES];
    double raw_before, raw_after, raw, best = 0;
    long postmaster = obx_bench_pg_postmaster(conn);
    size_t body;

    obx_bench_preload(conn, 1);
    body = published_body_bytes(conn);
    /* A first run on a fresh nats-server is slow (file store warming up): not a baseline. */
    (void)raw_rate(env, env->events / 4 > 1000 ? env->events / 4 : 1000, body);
    raw_before = raw_rate(env, env->events, body);
    for (int pair = 0; pair < PAIRS; pair++) {
        for (int i = 0; i < 2; i++) {
            int k = 2 * pair + (i ^ (pair & 1)); /* odd pairs: two writes first */

            cases[k] = (struct obx_bench_relay_case){.replicas = replicas[pair % REPLICA_CASES],
                                                     .prune = pair >= REPLICA_CASES,
                                                     .batch = env->batch,
                                                     .events = env->events,
                                                     .two_writes = k & 1,
                                                     .pg_postmaster = postmaster};
            rates[k] = measure_case(env, conn, &cases[k], &stream_msgs[k]);
            if (!cases[k].two_writes) { /* the best is the relay's as it ships */
                best = rates[k] > best ? rates[k] : best;
            }
        }
    }
    raw_after = raw_rate(env, env->events, body);
    /* Every ratio, the cases' and the summary's, reads against this one baseline. */
    raw = (raw_before + raw_after) / 2;
    for (int k = 0; k < CASES; k += 2) {
        emit_case(&cases[k], rates[k], raw, stream_msgs[k], &cases[k + 1], rates[k + 1]);
        emit_case(&cases[k + 1], rates[k + 1], raw, stream_msgs[k + 1], NULL, 0);
    }
    obx_bench_emit(json_pack("{s:s, s:s, s:f, s:f, s:f, s:I, s:I, s:i, s:f}", "bench", "relay",
                             "case", "raw_publish", "events_per_s", raw, "before", raw_before,
                             "after", raw_after, "events", (json_int_t)env->events, "body_bytes",
                             (json_int_t)body, "window", OBX_BENCH_RELAY_WINDOW, "best_relay_ratio",
                             best / raw));
}

static int
wanted(const struct obx_bench_env *env, const char *name)
{
    return env->only_case == NULL || strcmp(env->only_case, name) == 0;
}

int
obx_bench_relay(const struct obx_bench_env *env)
{
    PGconn *conn = obx_bench_connect(env);
    double p50, p99;
    long long samples;

    if (wanted(env, "rate")) {
        rate_cases(env, conn);
        obx_bench_claim_table(conn, 0);
    }
    if (wanted(env, "latency") &&
        obx_bench_relay_latency(env, 1000, env->seconds * 3, &p50, &p99, &samples) == 0) {
        obx_bench_emit(json_pack("{s:s, s:s, s:o, s:i, s:f, s:f, s:I, s:i}", "bench", "relay",
                                 "case", "latency", "settings", changed_settings(env->batch, 0),
                                 "rate", 1000, "p50_ms", p50, "p99_ms", p99, "samples",
                                 (json_int_t)samples, "replicas", 1));
    }
    if (wanted(env, "ordered")) {
        obx_bench_relay_ordered(env, conn);
    }
    obx_bench_exec(conn, "TRUNCATE outbox.events");
    obx_bench_close(conn);
    return wanted(env, "sustained") ? obx_bench_sustained(env) : 0;
}
