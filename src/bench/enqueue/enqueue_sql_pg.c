/* SPDX-License-Identifier: MIT */
/*
 * enqueue_sql_pg.c - the SQL writer against raw statements, the way a Go
 * or Python service calls it: prepared once, text parameters, an id back.
 *
 * Each SQL case has the raw statement it is compared with. A raw row is
 * the envelope a client would build itself, stored in bench_raw_events,
 * which has the outbox's columns, defaults, indexes and CHECK constraints
 * (LIKE ... INCLUDING ALL) but none of its triggers:
 *   raw_insert_one     one INSERT of one row, its own transaction
 *   raw_call_one       one call of bench_raw_call (below), its own
 *                      transaction: the floor of a function per event
 *   enqueue_sql_single one SELECT outbox.enqueue(...), its own transaction
 *   raw_insert_select  one INSERT ... SELECT of 100 envelopes out of one
 *                      jsonb array parameter (what an ORM's bulk insert of
 *                      prebuilt rows costs)
 *   raw_call_batch     BEGIN; 100 x SELECT bench_raw_call(...); COMMIT, a
 *                      PL/pgSQL function that does one raw INSERT and
 *                      nothing else: the floor of one statement per event
 *   enqueue_sql_batch  BEGIN; 100 x SELECT outbox.enqueue(...); COMMIT
 *   enqueue_sql_many   one SELECT outbox.enqueue_many($1) of 100 events
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/enqueue/enqueue_sql.h"
#include "common/buf.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { BATCH = OBX_BENCH_SQL_BATCH_SIZE };

static const char *const statements[][2] = {
    {"bench_raw_one", "INSERT INTO bench_raw_events (id, aggregate_type, aggregate_id, event_type, "
                      "envelope) VALUES ($1::uuid, $2, $3::uuid, $4, $5::jsonb)"},
    {"bench_sql_one", "SELECT outbox.enqueue($1, $2, $3, $4::jsonb)"},
    {"bench_raw_select",
     "INSERT INTO bench_raw_events (id, aggregate_type, aggregate_id, event_type, envelope) "
     "SELECT (e ->> 'id')::uuid, e ->> 'aggregate_type', (e ->> 'aggregate_id')::uuid, "
     "e ->> 'event_type', e FROM jsonb_array_elements($1::jsonb) AS e"},
    {"bench_sql_many", "SELECT outbox.enqueue_many($1::jsonb)"},
    {"bench_raw_call", "SELECT bench_raw_call($1::uuid, $2, $3::uuid, $4, $5::jsonb)"},
};

static const char raw_call_function[] =
    "CREATE OR REPLACE FUNCTION bench_raw_call(id uuid, aggregate_type text, aggregate_id uuid, "
    "event_type text, envelope jsonb) RETURNS uuid LANGUAGE plpgsql AS $fn$ BEGIN "
    "INSERT INTO bench_raw_events (id, aggregate_type, aggregate_id, event_type, envelope) "
    "VALUES (id, aggregate_type, aggregate_id, event_type, envelope); RETURN id; END $fn$";

void
obx_bench_sql_prepare(PGconn *conn)
{
    obx_bench_exec(conn, raw_call_function);
    for (size_t i = 0; i < sizeof(statements) / sizeof(statements[0]); i++) {
        PGresult *res = PQprepare(conn, statements[i][0], statements[i][1], 0, NULL);

        if (PQresultStatus(res) != PGRES_COMMAND_OK) {
            fprintf(stderr, "outbox-bench: prepare %s: %s", statements[i][0],
                    PQresultErrorMessage(res));
            exit(1);
        }
        PQclear(res);
    }
}

static void
run_prepared(PGconn *conn, const char *name, int n, const char *const *params)
{
    PGresult *res = PQexecPrepared(conn, name, n, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(res);

    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        fprintf(stderr, "outbox-bench: %s failed: %s", name, PQresultErrorMessage(res));
        exit(1);
    }
    PQclear(res);
}

/* The envelope a client would build itself for a raw row. */
static void
append_envelope(struct obx_buf *b, const char *id, const char *aggregate_id)
{
    obx_buf_appendf(b,
                    "{\"id\":\"%s\",\"event_type\":\"review.logged\",\"aggregate_type\":"
                    "\"movie\",\"aggregate_id\":\"%s\",\"occurred_at\":"
                    "\"2026-11-29T09:41:56.123Z\",\"schema_version\":1,\"payload\":%s}",
                    id, aggregate_id, obx_bench_payload);
}

/* One raw row, by the INSERT itself or by `statement` (bench_raw_call). */
static int
raw_insert_one(PGconn *conn, const char *statement)
{
    char id[37], aggregate_id[37];
    struct obx_buf env;
    const char *params[5];

    obx_bench_time_uuid(id);
    obx_bench_random_uuid(aggregate_id);
    obx_buf_init(&env);
    append_envelope(&env, id, aggregate_id);
    params[0] = id;
    params[1] = "movie";
    params[2] = aggregate_id;
    params[3] = "review.logged";
    params[4] = env.data;
    run_prepared(conn, statement, 5, params);
    obx_buf_fini(&env);
    return 1;
}

static void
sql_enqueue_one(PGconn *conn)
{
    char aggregate_id[37];
    const char *params[4] = {"movie", aggregate_id, "review.logged", obx_bench_payload};

    obx_bench_random_uuid(aggregate_id);
    run_prepared(conn, "bench_sql_one", 4, params);
}

/* One jsonb array of BATCH envelopes (raw) or events (enqueue_many). */
static int
run_array(PGconn *conn, int envelopes)
{
    struct obx_buf arr;
    const char *params[1];

    obx_buf_init(&arr);
    obx_buf_append_str(&arr, "[");
    for (int i = 0; i < BATCH; i++) {
        char id[37], aggregate_id[37];

        obx_bench_random_uuid(aggregate_id);
        obx_buf_append_str(&arr, i > 0 ? "," : "");
        if (envelopes) {
            obx_bench_time_uuid(id);
            append_envelope(&arr, id, aggregate_id);
        } else {
            obx_buf_appendf(&arr,
                            "{\"aggregate_type\":\"movie\",\"aggregate_id\":\"%s\","
                            "\"event_type\":\"review.logged\",\"payload\":%s}",
                            aggregate_id, obx_bench_payload);
        }
    }
    obx_buf_append_str(&arr, "]");
    params[0] = arr.data;
    run_prepared(conn, envelopes ? "bench_raw_select" : "bench_sql_many", 1, params);
    obx_buf_fini(&arr);
    return BATCH;
}

int
obx_bench_sql_run(PGconn *conn, enum obx_bench_sql_case which)
{
    switch (which) {
    case OBX_BENCH_RAW_INSERT_ONE:
        return raw_insert_one(conn, "bench_raw_one");
    case OBX_BENCH_RAW_CALL_ONE:
        return raw_insert_one(conn, "bench_raw_call");
    case OBX_BENCH_SQL_SINGLE:
        sql_enqueue_one(conn);
        return 1;
    case OBX_BENCH_RAW_INSERT_SELECT:
        return run_array(conn, 1);
    case OBX_BENCH_RAW_CALL_BATCH:
        obx_bench_exec(conn, "BEGIN");
        for (int i = 0; i < BATCH; i++) {
            raw_insert_one(conn, "bench_raw_call");
        }
        obx_bench_exec(conn, "COMMIT");
        return BATCH;
    case OBX_BENCH_SQL_BATCH:
        obx_bench_exec(conn, "BEGIN");
        for (int i = 0; i < BATCH; i++) {
            sql_enqueue_one(conn);
        }
        obx_bench_exec(conn, "COMMIT");
        return BATCH;
    case OBX_BENCH_SQL_MANY:
    default:
        return run_array(conn, 0);
    }
}
