/* SPDX-License-Identifier: MIT */
/*
 * test_aggregate_seq_batches.c - with ordering on (a new schema's default),
 * batch writers whose batches share aggregates, each batch in its own
 * order, never deadlock: outbox_enqueue_batch() and outbox.enqueue_many()
 * write a batch's events sorted by aggregate, so every batch takes the
 * aggregates' counter rows in one order, and a batch behind another waits
 * for its commit instead of holding a counter the other needs. Each
 * aggregate's events keep their order within the batch, so the numbers are
 * what the array's order gives.
 *
 * Writers are forked children, each with its own connection, released
 * together through a pipe; they report how many transactions failed, and
 * with which SQLSTATE, and leave with _exit().
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "outbox/outbox.h"

enum {
    WRITERS = 4,
    BATCHES = 25,    /* per writer, one transaction each */
    PER_BATCH = 60,  /* events per batch */
    AGGREGATES = 20, /* shared by every batch */
};

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh_ordered();
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(aggregate_seq_batches, .init = setup, .fini = teardown, .timeout = 120);

/* What a writer reports. */
struct writer_report {
    int failed;        /* transactions that did not commit */
    char sqlstate[6];  /* the first failure's */
    char message[600]; /* and its message */
};

/* Aggregate `k`'s id. */
static void
aggregate_id(int k, char out[37])
{
    snprintf(out, 37, "00000000-0000-4000-8000-%012x", k + 1);
}

/* The batch through outbox.enqueue_many(), the SQL writers' batch; 1 if it wrote. */
static int
enqueue_many(PGconn *c, const int *aggs, outbox_error *err)
{
    char json[PER_BATCH * 120] = "[", id[37];
    size_t used = 1;
    const char *params[1] = {json};
    PGresult *res;
    int ok;

    for (int i = 0; i < PER_BATCH; i++) {
        aggregate_id(aggs[i], id);
        used += (size_t)snprintf(json + used, sizeof(json) - used,
                                 "%s{\"aggregate_type\":\"order\",\"aggregate_id\":\"%s\","
                                 "\"event_type\":\"placed\",\"payload\":{}}",
                                 i ? "," : "", id);
    }
    snprintf(json + used, sizeof(json) - used, "]");
    res = PQexecParams(c, "SELECT outbox.enqueue_many($1::jsonb)", 1, NULL, params, NULL, NULL, 0);
    ok = PQresultStatus(res) == PGRES_TUPLES_OK;
    if (!ok) {
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

        snprintf(err->sqlstate, sizeof(err->sqlstate), "%s", state ? state : "");
        snprintf(err->message, sizeof(err->message), "%s", PQresultErrorMessage(res));
    }
    PQclear(res);
    return ok;
}

/* The batch through outbox_enqueue_batch(), the C writer; 1 if it wrote. */
static int
enqueue_c(PGconn *c, const int *aggs, outbox_error *err)
{
    outbox_event *events[PER_BATCH];
    char id[37];
    int ok = 1;

    for (int i = 0; i < PER_BATCH; i++) {
        events[i] = outbox_event_new();
        aggregate_id(aggs[i], id);
        ok = ok && outbox_event_set_route(events[i], "order", "placed", err) == OUTBOX_OK &&
             outbox_event_set_aggregate_id(events[i], id, err) == OUTBOX_OK &&
             outbox_event_set_payload_json(events[i], "{}", 2, err) == OUTBOX_OK;
    }
    ok = ok && outbox_enqueue_batch(c, events, PER_BATCH, err) == OUTBOX_OK;
    for (int i = 0; i < PER_BATCH; i++) {
        outbox_event_free(events[i]);
    }
    return ok;
}

/*
 * One batch in its own transaction: PER_BATCH events over the aggregates
 * in a shuffled order, through the C writer or (`sql`) enqueue_many().
 */
static int
write_batch(PGconn *c, int sql, unsigned *seed, outbox_error *err)
{
    int aggs[PER_BATCH];
    int ok;

    for (int i = 0; i < PER_BATCH; i++) {
        aggs[i] = (int)(rand_r(seed) % AGGREGATES);
    }
    PQclear(PQexec(c, "BEGIN"));
    ok = sql ? enqueue_many(c, aggs, err) : enqueue_c(c, aggs, err);
    if (ok) {
        PGresult *res = PQexec(c, "COMMIT");

        ok = PQresultStatus(res) == PGRES_COMMAND_OK;
        PQclear(res);
    } else {
        PQclear(PQexec(c, "ROLLBACK"));
    }
    return ok;
}

static void
writer_child(int index, int sql, const char *url, int gate_fd, int report_fd)
{
    struct writer_report r;
    PGconn *c = PQconnectdb(url);
    unsigned seed = 0x5eedu + (unsigned)index;
    outbox_error err;
    char go;

    memset(&r, 0, sizeof(r));
    while (read(gate_fd, &go, 1) < 0 && errno == EINTR) {
    }
    for (int b = 0; b < BATCHES; b++) {
        memset(&err, 0, sizeof(err));
        if (PQstatus(c) != CONNECTION_OK || !write_batch(c, sql, &seed, &err)) {
            if (r.failed++ == 0) {
                snprintf(r.sqlstate, sizeof(r.sqlstate), "%s", err.sqlstate);
                snprintf(r.message, sizeof(r.message), "%s",
                         err.message[0] ? err.message : PQerrorMessage(c));
            }
        }
    }
    if (write(report_fd, &r, sizeof(r)) != (ssize_t)sizeof(r)) {
        _exit(1);
    }
    PQfinish(c);
    _exit(0);
}

/* WRITERS writers at once, batches through the C writer or (`sql`) enqueue_many(). */
static void
batches_never_deadlock(int sql)
{
    char *url = strdup(harness_db_url());
    int gate[2], report[2];
    pid_t pids[WRITERS];
    char query[256];

    cr_assert_eq(pipe(gate), 0);
    cr_assert_eq(pipe(report), 0);
    fflush(NULL);
    for (int i = 0; i < WRITERS; i++) {
        pids[i] = fork();
        cr_assert_neq(pids[i], -1, "fork: %s", strerror(errno));
        if (pids[i] == 0) {
            close(gate[1]);
            close(report[0]);
            writer_child(i, sql, url, gate[0], report[1]);
        }
    }
    close(gate[0]);
    close(report[1]);
    close(gate[1]); /* all start together */
    for (int i = 0; i < WRITERS; i++) {
        struct writer_report r;
        int wstatus = 0;

        cr_assert_eq(read(report[0], &r, sizeof(r)), (ssize_t)sizeof(r), "a writer did not report");
        cr_expect_eq(r.failed, 0, "%d of %d batches failed, the first with [%s] %s", r.failed,
                     BATCHES, r.sqlstate, r.message);
        while (waitpid(pids[i], &wstatus, 0) < 0 && errno == EINTR) {
        }
        cr_expect(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0, "writer %d died", i);
    }
    close(report[0]);

    /* Every event committed, and each aggregate is numbered 1..n without a gap. */
    cr_expect_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.events"),
                 (long long)WRITERS * BATCHES * PER_BATCH);
    snprintf(query, sizeof(query),
             "SELECT count(*) FROM (SELECT aggregate_id, count(*) AS n, count(DISTINCT "
             "aggregate_seq) AS d, min(aggregate_seq) AS lo, max(aggregate_seq) AS hi "
             "FROM outbox.events GROUP BY 1) AS a WHERE n <> d OR lo <> 1 OR hi <> n");
    cr_expect_eq(harness_scalar_ll(conn, query), 0,
                 "an aggregate's numbers have a gap or a repeat");
    free(url);
}

Test(aggregate_seq_batches, c_batches_sharing_aggregates_in_any_order_never_deadlock)
{
    batches_never_deadlock(0);
}

Test(aggregate_seq_batches, sql_batches_sharing_aggregates_in_any_order_never_deadlock)
{
    batches_never_deadlock(1);
}

/*
 * A batch's events of one aggregate keep the array's order: the first in
 * the array gets the lower number, whatever the other aggregates between.
 */
Test(aggregate_seq_batches, a_batch_numbers_each_aggregate_in_the_arrays_order)
{
    static const char *const order[] = {"B", "A", "B", "A", "C", "B"};
    const char *ids[] = {"00000000-0000-4000-8000-00000000000a",
                         "00000000-0000-4000-8000-00000000000b",
                         "00000000-0000-4000-8000-00000000000c"};
    outbox_event *events[6];
    outbox_error err;
    char type[16];

    for (int i = 0; i < 6; i++) {
        events[i] = outbox_event_new();
        snprintf(type, sizeof(type), "step%d", i);
        cr_assert_eq(outbox_event_set_route(events[i], "order", type, &err), OUTBOX_OK);
        cr_assert_eq(outbox_event_set_aggregate_id(events[i], ids[order[i][0] - 'A'], &err),
                     OUTBOX_OK);
        cr_assert_eq(outbox_event_set_payload_json(events[i], "{}", 2, &err), OUTBOX_OK);
    }
    harness_exec(conn, "BEGIN");
    cr_assert_eq(outbox_enqueue_batch(conn, events, 6, &err), OUTBOX_OK, "%s", err.message);
    harness_exec(conn, "COMMIT");
    for (int i = 0; i < 6; i++) {
        outbox_event_free(events[i]);
    }
    /* B: step0, step2, step5; A: step1, step3; C: step4. */
    cr_expect_eq(harness_scalar_ll(conn, "SELECT (string_agg(event_type || '=' || aggregate_seq, "
                                         "',' ORDER BY event_type) = 'step0=1,step1=1,step2=2,"
                                         "step3=2,step4=1,step5=3')::int FROM outbox.events"),
                 1, "the numbers do not follow the array's order per aggregate");
}
