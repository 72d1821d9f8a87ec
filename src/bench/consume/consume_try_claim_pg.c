/* SPDX-License-Identifier: MIT */
/*
 * consume_try_claim_pg.c - what outbox.try_claim() costs a consumer that
 * writes its effect in its own transaction (the Go and Node examples, and
 * any service with a database effect), against the same transaction with
 * the effect's INSERT alone. One event per transaction, as the examples
 * run it: BEGIN, try_claim(id, handler, message body), the effect's
 * INSERT, COMMIT, each statement prepared once and sent as its own round
 * trip, as pgx and node-postgres send them. Rounds of each alternate on
 * one connection; the medians are reported, with PostgreSQL's CPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { TRY_CLAIM_MAX_EVENTS = 5000 }; /* per round */

static const char effect_sql[] =
    "INSERT INTO bench_effects (event_id, handled_at) VALUES ($1::uuid, clock_timestamp())";
static const char claim_sql[] = "SELECT outbox.try_claim($1::uuid, 'bench_try', $2::jsonb)";

static void
prepare(PGconn *conn, const char *name, const char *sql)
{
    PGresult *r = PQprepare(conn, name, sql, 0, NULL);

    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        fprintf(stderr, "outbox-bench: try_claim case: cannot prepare %s: %s", name,
                PQerrorMessage(conn));
        exit(1);
    }
    PQclear(r);
}

static void
run_prepared(PGconn *conn, const char *name, int n, const char *const *params, int want_true)
{
    PGresult *r = PQexecPrepared(conn, name, n, params, NULL, NULL, 0);
    ExecStatusType s = PQresultStatus(r);

    if ((s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) ||
        (want_true && strcmp(PQgetvalue(r, 0, 0), "t") != 0)) {
        fprintf(stderr, "outbox-bench: try_claim case: %s failed: %s", name,
                s == PGRES_TUPLES_OK ? "it did not claim the event\n" : PQerrorMessage(conn));
        exit(1);
    }
    PQclear(r);
}

/*
 * One round: `count` transactions from event `first` of `ids`/`bodies`,
 * each with try_claim() first when `claim`. Returns its wall time per
 * event in µs; `*pg_us` PostgreSQL's CPU per event.
 */
static double
round_of(PGconn *conn, long postmaster, PGresult *events, int first, int count, int claim,
         double *pg_us)
{
    struct obx_bench_pg_cpu cpu;
    double start;

    obx_bench_pg_cpu_start(&cpu, postmaster);
    start = obx_bench_now();
    for (int i = first; i < first + count; i++) {
        const char *params[2] = {PQgetvalue(events, i, 0), PQgetvalue(events, i, 1)};

        obx_bench_exec(conn, "BEGIN");
        if (claim) {
            run_prepared(conn, "bench_try_claim", 2, params, 1);
        }
        run_prepared(conn, "bench_effect", 1, params, 0);
        obx_bench_exec(conn, "COMMIT");
    }
    *pg_us = obx_bench_pg_cpu_us_per_event(&cpu, count);
    return (obx_bench_now() - start) * 1e6 / count;
}

void
obx_bench_try_claim_case(const struct obx_bench_env *env, PGconn *conn)
{
    int n = env->events < TRY_CLAIM_MAX_EVENTS ? (int)env->events : TRY_CLAIM_MAX_EVENTS;
    int rounds = env->rounds;
    double bare[OBX_BENCH_MAX_ROUNDS], claimed[OBX_BENCH_MAX_ROUNDS];
    double bare_pg[OBX_BENCH_MAX_ROUNDS], claimed_pg[OBX_BENCH_MAX_ROUNDS];
    long postmaster = obx_bench_pg_postmaster(conn);
    double b, c, bp, cp;
    PGresult *events;

    obx_bench_effects_reset(conn);
    obx_bench_preload(conn, (long long)n * rounds);
    /* the message body a consumer hands to try_claim(): the envelope with its number */
    events = PQexec(conn, "SELECT id::text, CASE WHEN aggregate_seq IS NULL THEN envelope ELSE "
                          "envelope || jsonb_build_object('aggregate_seq', aggregate_seq) END "
                          "FROM outbox.events ORDER BY id");
    if (PQresultStatus(events) != PGRES_TUPLES_OK || PQntuples(events) < n * rounds) {
        fprintf(stderr, "outbox-bench: try_claim case: cannot read its events: %s",
                PQerrorMessage(conn));
        exit(1);
    }
    prepare(conn, "bench_effect", effect_sql);
    prepare(conn, "bench_try_claim", claim_sql);
    for (int r = 0; r < rounds; r++) {
        /* which goes first alternates, so neither always meets a warmer server */
        int claim_first = r % 2;

        if (claim_first) {
            claimed[r] = round_of(conn, postmaster, events, r * n, n, 1, &claimed_pg[r]);
            bare[r] = round_of(conn, postmaster, events, r * n, n, 0, &bare_pg[r]);
        } else {
            bare[r] = round_of(conn, postmaster, events, r * n, n, 0, &bare_pg[r]);
            claimed[r] = round_of(conn, postmaster, events, r * n, n, 1, &claimed_pg[r]);
        }
    }
    PQclear(events);
    obx_bench_exec(conn, "DEALLOCATE ALL");
    b = obx_bench_median(bare, rounds);
    c = obx_bench_median(claimed, rounds);
    bp = obx_bench_median(bare_pg, rounds);
    cp = obx_bench_median(claimed_pg, rounds);
    obx_bench_emit(json_pack(
        "{s:s, s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:o, s:o, s:b}", "bench", "consume", "case",
        "try_claim", "events", n, "rounds", rounds, "bare_insert_us_per_event", b,
        "try_claim_us_per_event", c, "try_claim_cost_us_per_event", c - b, "ratio_to_bare",
        b > 0 ? c / b : 0, "bare_pg_cpu_us_per_event", obx_bench_number_or_null(bp),
        "try_claim_pg_cpu_us_per_event", obx_bench_number_or_null(cp), "ordering",
        obx_bench_scalar(conn, "SELECT outbox.ordering_on()::int") != 0));
    obx_bench_effects_reset(conn);
}
