/* SPDX-License-Identifier: MIT */
/*
 * ledger_pg.c - a ledger's connection, its transactions, the handlers'
 * own statements and the retention prune (see ledger.h; the claim and
 * what follows it live in ledger_claim_pg.c).
 *
 * Ledger transactions are always READ COMMITTED, whatever the role's
 * default: a claim must see rows other sessions committed while it
 * waited for them, where a snapshot-bound level would fail or miss them.
 */
#include "ledger.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "common/error.h"
#include "common/error_pg.h"
#include "common/sql.h"
#include "ledger_int.h"
#include "sql_gen.h"
#include "support/pg_conn.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* pg_type.oid of jsonb, a fixed catalog value: the envelope's type for handler statements. */
#define JSONB_OID 3802

/* The savepoint that isolates one event's handler from the rest of its batch. */
#define EVENT_SAVEPOINT "obx_ledger_event"

static const char *const sql_templates[OBX_LEDGER_SQL_COUNT] = {
    [OBX_LEDGER_CLAIM] = obx_sql_ledger_claim,
    [OBX_LEDGER_MARK_DONE] = obx_sql_ledger_mark_done,
    [OBX_LEDGER_RECORD_FAILURE] = obx_sql_ledger_record_failure,
    [OBX_LEDGER_RELEASE] = obx_sql_ledger_release,
    [OBX_LEDGER_PRUNE] = obx_sql_ledger_prune,
    [OBX_LEDGER_HANDLER_GAUGES] = obx_sql_ledger_handler_gauges,
    [OBX_LEDGER_REGISTER] = obx_sql_ledger_register_handlers,
    [OBX_LEDGER_RENEW] = obx_sql_ledger_renew,
    [OBX_LEDGER_CLAIM_ORDERED] = obx_sql_ledger_claim_ordered,
    [OBX_LEDGER_MARK_DONE_ORDERED] = obx_sql_ledger_mark_done_ordered,
    [OBX_LEDGER_PARKED_TAKE] = obx_sql_ledger_parked_take,
    [OBX_LEDGER_PARKED_WAITING] = obx_sql_ledger_parked_waiting,
    [OBX_LEDGER_PARKED_SETTLE] = obx_sql_ledger_parked_settle,
    [OBX_LEDGER_ORDER_BASELINE] = obx_sql_ledger_order_baseline,
    [OBX_LEDGER_OTHER_HANDLER_GAUGES] = obx_sql_ledger_other_handler_gauges,
    [OBX_LEDGER_CLAIM_FRESH] = obx_sql_ledger_claim_fresh,
    [OBX_LEDGER_PARKED_FILL] = obx_sql_ledger_parked_fill,
};

void
obx_ledger_close(struct obx_ledger *ledger)
{
    if (ledger != NULL) {
        obx_pg_session_fini(&ledger->pg);
        free(ledger->prepared);
        free(ledger);
    }
}

outbox_status
obx_ledger_open(const struct obx_store_options *opts, struct obx_ledger **out, outbox_error *err)
{
    struct obx_ledger *ledger;
    outbox_status status;

    obx_error_reset(err);
    ledger = calloc(1, sizeof(*ledger));
    if (ledger == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "open ledger: out of memory");
    }
    status = obx_pg_session_init(&ledger->pg, opts->conninfo, opts->application_name, opts->schema,
                                 sql_templates, OBX_LEDGER_SQL_COUNT, err);
    if (status == OUTBOX_OK) {
        status = obx_pg_session_connect(&ledger->pg, err);
    }
    if (status != OUTBOX_OK) {
        obx_ledger_close(ledger);
        return status;
    }
    *out = ledger;
    return OUTBOX_OK;
}

outbox_status
obx_ledger_reconnect(struct obx_ledger *ledger, outbox_error *err)
{
    obx_error_reset(err);
    /* A new session knows none of the old one's prepared statements. */
    for (size_t i = 0; i < ledger->prepared_count; i++) {
        ledger->prepared[i].ready = 0;
    }
    return obx_pg_session_connect(&ledger->pg, err);
}

/* OUTBOX_ENOTXN unless a transaction is open; `aborted_ok` also accepts a failed one. */
outbox_status
obx_ledger_require_transaction(struct obx_ledger *ledger, int aborted_ok, const char *doing,
                               outbox_error *err)
{
    PGTransactionStatusType tx;
    outbox_status status = obx_pg_session_require(&ledger->pg, err);

    if (status != OUTBOX_OK) {
        return status;
    }
    tx = PQtransactionStatus(ledger->pg.conn);
    if (tx == PQTRANS_INTRANS || (aborted_ok && tx == PQTRANS_INERROR)) {
        return OUTBOX_OK;
    }
    if (tx == PQTRANS_INERROR) {
        return obx_fail(err, OUTBOX_ENOTXN,
                        "%s: the transaction has failed: roll back to the savepoint first", doing);
    }
    return obx_fail(err, OUTBOX_ENOTXN, "%s: no transaction is open: begin first", doing);
}

outbox_status
obx_ledger_begin(struct obx_ledger *ledger, outbox_error *err)
{
    outbox_status status;

    obx_error_reset(err);
    status = obx_pg_session_require(&ledger->pg, err);
    if (status != OUTBOX_OK) {
        return status;
    }
    if (PQtransactionStatus(ledger->pg.conn) != PQTRANS_IDLE) {
        return obx_fail(err, OUTBOX_EINVAL, "begin: a transaction is already open");
    }
    return obx_pg_exec(ledger->pg.conn, "BEGIN ISOLATION LEVEL READ COMMITTED", "begin", err);
}

outbox_status
obx_ledger_commit(struct obx_ledger *ledger, outbox_error *err)
{
    outbox_status status;

    obx_error_reset(err);
    status = obx_ledger_require_transaction(ledger, 1, "commit", err);
    if (status != OUTBOX_OK) {
        return status;
    }
    /* PostgreSQL answers COMMIT of a failed transaction with a successful ROLLBACK. */
    if (PQtransactionStatus(ledger->pg.conn) == PQTRANS_INERROR) {
        obx_ledger_rollback(ledger);
        status =
            obx_fail(err, OUTBOX_EDB, "commit: the transaction had failed and was rolled back");
        if (err != NULL) {
            snprintf(err->sqlstate, sizeof(err->sqlstate), "%s", "25P02");
        }
        return status;
    }
    return obx_pg_exec(ledger->pg.conn, "COMMIT", "commit", err);
}

void
obx_ledger_rollback(struct obx_ledger *ledger)
{
    PGTransactionStatusType tx;

    if (ledger == NULL || ledger->pg.conn == NULL || PQstatus(ledger->pg.conn) != CONNECTION_OK) {
        return; /* a lost connection took its transaction with it */
    }
    tx = PQtransactionStatus(ledger->pg.conn);
    if (tx == PQTRANS_INTRANS || tx == PQTRANS_INERROR) {
        PQclear(PQexec(ledger->pg.conn, "ROLLBACK"));
    }
}

/* One savepoint statement, inside the open transaction (`aborted_ok`: a failed one too). */
static outbox_status
savepoint_step(struct obx_ledger *ledger, int aborted_ok, const char *sql, const char *doing,
               outbox_error *err)
{
    outbox_status status;

    obx_error_reset(err);
    status = obx_ledger_require_transaction(ledger, aborted_ok, doing, err);
    return status == OUTBOX_OK ? obx_pg_exec(ledger->pg.conn, sql, doing, err) : status;
}

outbox_status
obx_ledger_savepoint(struct obx_ledger *ledger, outbox_error *err)
{
    return savepoint_step(ledger, 0, "SAVEPOINT " EVENT_SAVEPOINT, "savepoint", err);
}

outbox_status
obx_ledger_release_savepoint(struct obx_ledger *ledger, outbox_error *err)
{
    return savepoint_step(ledger, 0, "RELEASE SAVEPOINT " EVENT_SAVEPOINT, "release savepoint",
                          err);
}

/* Undoes what followed the savepoint, which stays in place (SQL's ROLLBACK TO). */
outbox_status
obx_ledger_rollback_to_savepoint(struct obx_ledger *ledger, outbox_error *err)
{
    return savepoint_step(ledger, 1, "ROLLBACK TO SAVEPOINT " EVENT_SAVEPOINT,
                          "roll back to savepoint", err);
}

outbox_status
obx_ledger_run_sql(struct obx_ledger *ledger, const char *statement, const char *envelope,
                   outbox_error *err)
{
    /* Typed, so $1->>'id' works and a statement that ignores $1 is accepted too. */
    const Oid types[] = {JSONB_OID};
    const char *params[] = {envelope};
    PGresult *res;
    ExecStatusType st;
    outbox_status status;

    obx_error_reset(err);
    if (statement == NULL || statement[0] == '\0') {
        return obx_fail(err, OUTBOX_EINVAL, "handler statement is empty");
    }
    status = obx_ledger_require_transaction(ledger, 0, "handler statement", err);
    if (status != OUTBOX_OK) {
        return status;
    }
    res = PQexecParams(ledger->pg.conn, statement, 1, types, params, NULL, NULL, 0);
    st = PQresultStatus(res);
    if (st == PGRES_EMPTY_QUERY) {
        status = obx_fail(err, OUTBOX_EINVAL, "handler statement is empty");
    } else if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        status = obx_fail_pg_handler(err, ledger->pg.conn, res, "handler statement failed");
    }
    PQclear(res);
    return status;
}

outbox_status
obx_ledger_prune(struct obx_ledger *ledger, long long retention_seconds, int limit,
                 struct obx_prune_cursor *cursor, size_t *deleted, outbox_error *err)
{
    obx_error_reset(err);
    return obx_pg_session_prune(&ledger->pg, OBX_LEDGER_PRUNE, retention_seconds, limit,
                                cursor != NULL ? cursor->after : NULL, "prune ledger", deleted,
                                err);
}

PGconn *
obx_ledger_connection(struct obx_ledger *ledger)
{
    return ledger->pg.conn;
}

enum obx_ledger_txn_state
obx_ledger_txn_state(struct obx_ledger *ledger)
{
    if (PQstatus(ledger->pg.conn) == CONNECTION_BAD) {
        return OBX_LEDGER_TXN_BROKEN;
    }
    switch (PQtransactionStatus(ledger->pg.conn)) {
    case PQTRANS_INTRANS:
        return OBX_LEDGER_TXN_OPEN;
    case PQTRANS_INERROR:
        return OBX_LEDGER_TXN_FAILED;
    case PQTRANS_UNKNOWN:
        return OBX_LEDGER_TXN_BROKEN;
    default:
        return OBX_LEDGER_TXN_NONE;
    }
}

/* The slot of `key`, added when new; NULL out of memory. */
static struct obx_prepared *
prepared_slot(struct obx_ledger *ledger, const void *key, size_t *index)
{
    struct obx_prepared *grown;

    for (size_t i = 0; i < ledger->prepared_count; i++) {
        if (ledger->prepared[i].key == key) {
            *index = i;
            return &ledger->prepared[i];
        }
    }
    grown = realloc(ledger->prepared, (ledger->prepared_count + 1) * sizeof(*grown));
    if (grown == NULL) {
        return NULL;
    }
    ledger->prepared = grown;
    *index = ledger->prepared_count++;
    grown[*index] = (struct obx_prepared){.key = key, .ready = 0};
    return &grown[*index];
}

int
obx_ledger_statement_name(struct obx_ledger *ledger, const void *key, char name[32])
{
    size_t index;
    struct obx_prepared *p = prepared_slot(ledger, key, &index);

    if (p == NULL) {
        return -1;
    }
    snprintf(name, 32, "obx_handler_%zu", index);
    return !p->ready;
}

void
obx_ledger_statement_prepared(struct obx_ledger *ledger, const void *key, int ready)
{
    size_t index;
    struct obx_prepared *p = prepared_slot(ledger, key, &index);

    if (p != NULL) {
        p->ready = ready;
    }
}
