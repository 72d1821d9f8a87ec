/* SPDX-License-Identifier: MIT */
/*
 * enqueue_sql.h - the SQL writer's cases of `outbox-bench enqueue`
 * (outbox.enqueue() and outbox.enqueue_many() as a Go or Python service
 * calls them: prepared statements, text parameters) and the raw statements
 * they are measured against.
 */
#ifndef OBX_BENCH_ENQUEUE_SQL_H
#define OBX_BENCH_ENQUEUE_SQL_H

#include <libpq-fe.h>

enum obx_bench_sql_case {
    OBX_BENCH_RAW_INSERT_ONE, /* one raw row, its own transaction */
    OBX_BENCH_RAW_CALL_ONE,   /* one call of a function doing one raw INSERT, its own transaction */
    OBX_BENCH_SQL_SINGLE,     /* one outbox.enqueue(), its own transaction */
    OBX_BENCH_RAW_INSERT_SELECT, /* INSERT ... SELECT of 100 envelopes from one jsonb array */
    OBX_BENCH_RAW_CALL_BATCH,    /* BEGIN; 100 calls of a function doing one raw INSERT; COMMIT */
    OBX_BENCH_SQL_BATCH,         /* BEGIN; 100 outbox.enqueue() calls; COMMIT */
    OBX_BENCH_SQL_MANY,          /* one outbox.enqueue_many() of 100 events */
    OBX_BENCH_SQL_CASES
};

/* Events per transaction of the batch cases. */
enum { OBX_BENCH_SQL_BATCH_SIZE = 100 };

/* Prepares the statements of every case on `conn` (into bench_raw_events and the outbox). */
void obx_bench_sql_prepare(PGconn *conn);

/* Runs one transaction of `which`; returns the events it wrote. Exits 1 on failure. */
int obx_bench_sql_run(PGconn *conn, enum obx_bench_sql_case which);

#endif
