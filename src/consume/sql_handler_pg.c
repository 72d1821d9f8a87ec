/* SPDX-License-Identifier: MIT */
/*
 * sql_handler_pg.c - SQL handlers: one statement per event, $1 = the
 * envelope as jsonb, run inside the ledger's transaction so its effects
 * commit with the claim and the `done` mark or not at all.
 *
 * A batch goes out as one libpq pipeline: every statement is sent, then one
 * sync, then the results are read - one round trip instead of one per
 * event. The pipeline runs inside the open transaction, so a failing
 * statement aborts it; the ones after it are reported as not run (RETRY),
 * and the consumer redoes the batch event by event.
 *
 * The statement is prepared once per ledger connection (the first pipeline
 * on it carries the prepare): parsing and planning it for every event cost
 * the database more than running it.
 */
#include <string.h>

#include "common/error.h"
#include "common/error_pg.h"
#include "delivery.h"
#include "handler.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define JSONB_OID 3802 /* so $1->>'id' needs no cast in the statement */

/* The outcome of one statement's result. */
static outbox_handler_result
classify(PGconn *conn, PGresult *res, outbox_error *err)
{
    ExecStatusType st = PQresultStatus(res);
    const char *sqlstate;

    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        return OUTBOX_HANDLER_DONE;
    }
    if (st == PGRES_PIPELINE_ABORTED) {
        return OUTBOX_HANDLER_RETRY; /* not run: an earlier statement failed */
    }
    sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    /*
     * Not the handler's failure, so no attempt is spent: a lost connection
     * (an outage), and class 40 (a deadlock or serialization failure with
     * a concurrent transaction), which goes away when tried again. Its own
     * statement or lock timeout is its failure.
     */
    if (obx_fail_pg_handler(err, conn, res, "sql handler") == OUTBOX_EUNAVAILABLE ||
        (sqlstate != NULL && strncmp(sqlstate, "40", 2) == 0)) {
        return OUTBOX_HANDLER_RETRY;
    }
    return OUTBOX_HANDLER_FAIL;
}

static void
fail_all(size_t count, outbox_handler_result *results, outbox_error *errs, PGconn *conn)
{
    for (size_t i = 0; i < count; i++) {
        results[i] = OUTBOX_HANDLER_RETRY;
        obx_fail(&errs[i], OUTBOX_EUNAVAILABLE, "sql handler: %s", PQerrorMessage(conn));
    }
}

/*
 * Reads and drops results up to the sync's, so the pipeline can be left:
 * each statement's results end in a NULL, so only two NULLs in a row (or a
 * broken connection) mean nothing more is coming.
 */
static void
drain_to_sync(PGconn *conn)
{
    int nulls = 0;

    while (nulls < 2 && PQstatus(conn) == CONNECTION_OK) {
        PGresult *res = PQgetResult(conn);
        int sync = res != NULL && PQresultStatus(res) == PGRES_PIPELINE_SYNC;

        nulls = res == NULL ? nulls + 1 : 0;
        PQclear(res);
        if (sync) {
            return;
        }
    }
}

/* PostgreSQL forgot the prepared statement (a pooler's DISCARD ALL, say). */
static int
statement_forgotten(const PGresult *res)
{
    const char *sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);

    return sqlstate != NULL && strcmp(sqlstate, "26000") == 0;
}

/*
 * Reads the prepare's result (when one was sent), one result per
 * statement, then the sync's. A failed prepare (a statement that does not
 * parse, a missing table) is every event's outcome: the executions after
 * it did not run.
 */
static void
read_results(struct obx_ledger *ledger, const char *statement, int prepared_now, size_t count,
             outbox_handler_result *results, outbox_error *errs)
{
    PGconn *conn = obx_ledger_connection(ledger);
    outbox_handler_result prepare_result = OUTBOX_HANDLER_DONE;
    outbox_error prepare_err = {0};

    if (prepared_now) {
        PGresult *res = PQgetResult(conn);

        prepare_result = res ? classify(conn, res, &prepare_err) : OUTBOX_HANDLER_RETRY;
        obx_ledger_statement_prepared(ledger, statement, prepare_result == OUTBOX_HANDLER_DONE);
        PQclear(res);
        PQclear(PQgetResult(conn));
    }
    for (size_t i = 0; i < count; i++) {
        PGresult *res = PQgetResult(conn);

        results[i] = res ? classify(conn, res, &errs[i]) : OUTBOX_HANDLER_RETRY;
        if (res != NULL && statement_forgotten(res)) {
            obx_ledger_statement_prepared(ledger, statement, 0);
            results[i] = OUTBOX_HANDLER_RETRY; /* prepared again next time; nothing spent */
        }
        if (prepare_result != OUTBOX_HANDLER_DONE) {
            results[i] = prepare_result;
            errs[i] = prepare_err;
        }
        PQclear(res);
        PQclear(PQgetResult(conn)); /* the NULL that ends this statement's results */
    }
    drain_to_sync(conn);
}

/*
 * Runs the statement for `count` deliveries inside the ledger's open
 * transaction, in one pipeline (prepared once per connection), filling
 * results[i] (and errs[i] for a FAIL). A statement that fails aborts the
 * rest: they come back as RETRY, having not run.
 */
static void
run_in_txn(const struct obx_handler *h, struct obx_ledger *ledger, const outbox_delivery *const *d,
           size_t count, outbox_handler_result *results, outbox_error *errs)
{
    const char *statement = h->statement;
    const Oid types[] = {JSONB_OID};
    PGconn *conn = obx_ledger_connection(ledger);
    char name[32];
    int need_prepare = obx_ledger_statement_name(ledger, statement, name);
    int sent = PQenterPipelineMode(conn);

    if (sent && need_prepare == 1) {
        sent = PQsendPrepare(conn, name, statement, 1, types);
    }
    for (size_t i = 0; sent && i < count; i++) {
        const char *params[] = {outbox_delivery_envelope(d[i], NULL)};

        sent = need_prepare < 0
                   ? PQsendQueryParams(conn, statement, 1, types, params, NULL, NULL, 0)
                   : PQsendQueryPrepared(conn, name, 1, params, NULL, NULL, 0);
    }
    if (sent && PQpipelineSync(conn)) {
        read_results(ledger, statement, need_prepare == 1, count, results, errs);
    } else {
        fail_all(count, results, errs, conn);
        /* Statements queued before the failure still answer: read them off, or the
         * connection would stay in pipeline mode and refuse the ledger's next command. */
        if (PQpipelineStatus(conn) != PQ_PIPELINE_OFF && PQpipelineSync(conn)) {
            drain_to_sync(conn);
        }
    }
    PQexitPipelineMode(conn);
}

const struct obx_handler_ops obx_sql_kind = {.kind = "sql", .run_in_txn = run_in_txn};
