/* SPDX-License-Identifier: MIT */
/*
 * consume_handler_pg.c - the consumer benchmark's handler: a SQL handler,
 * as `outboxd consume --handler NAME=sql:...` runs it, writing one effect
 * row per event (no unique constraint, so a duplicate would show).
 */
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* The statement a declared sql: handler would run: one effect row per event. */
const char obx_bench_handler_sql[] = "INSERT INTO bench_effects (event_id, handled_at) "
                                     "VALUES (($1->>'id')::uuid, clock_timestamp())";

void
obx_bench_effects_reset(PGconn *conn)
{
    obx_bench_exec(conn, "SET client_min_messages = warning");
    obx_bench_exec(conn, "CREATE TABLE IF NOT EXISTS bench_effects (event_id uuid NOT NULL, "
                         "handled_at timestamptz NOT NULL)");
    obx_bench_exec(conn, "TRUNCATE bench_effects, outbox.processed_events, outbox.events");
}

long long
obx_bench_effects_duplicated(PGconn *conn)
{
    return obx_bench_scalar(conn, "SELECT count(*) - count(DISTINCT event_id) FROM bench_effects");
}
