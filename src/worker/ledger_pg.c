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

#include "error.h"
#include "ledger_int.h"
#include "pg_conn.h"
#include "sql.h"
#include "sql_gen.h"

#include "banned.h" /* last: poisons unsafe functions */

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
};

outbox_status
obx_ledger_require_connection(struct obx_ledger *ledger, outbox_error *err)
{
    if (ledger->conn == NULL || PQstatus(ledger->conn) != CONNECTION_OK) {
        return obx_fail(err, OUTBOX_EUNAVAILABLE, "not connected to postgresql: reconnect first");
    }
    return OUTBOX_OK;
}

PGresult *
obx_ledger_exec(struct obx_ledger *ledger, enum obx_ledger_sql which, const char *const *params,
                int nparams)
{
    return PQexecParams(ledger->conn, ledger->sql[which], nparams, NULL, params, NULL, NULL, 0);
}

outbox_status
obx_ledger_check(struct obx_ledger *ledger, const PGresult *res, const char *doing,
                 outbox_error *err)
{
    ExecStatusType st = PQresultStatus(res);

    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
        return OUTBOX_OK;
    }
    return obx_fail_pg(err, ledger->conn, res, doing);
}

void
obx_ledger_close(struct obx_ledger *ledger)
{
    if (ledger == NULL) {
        return;
    }
    PQfinish(ledger->conn);
    free(ledger->prepared);
    obx_sql_free_set(ledger->sql, OBX_LEDGER_SQL_COUNT);
    obx_pg_target_fini(&ledger->target);
    free(ledger);
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
    status = obx_pg_target_init(&ledger->target, opts->conninfo, opts->application_name,
                                opts->schema, err);
    if (status == OUTBOX_OK) {
        status =
            obx_sql_render_set(opts->schema, sql_templates, OBX_LEDGER_SQL_COUNT, ledger->sql, err);
    }
    if (status == OUTBOX_OK) {
        status = obx_pg_target_connect(&ledger->target, &ledger->conn, err);
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
    return obx_pg_target_connect(&ledger->target, &ledger->conn, err);
}

/* A statement without parameters (BEGIN, SAVEPOINT...), checked. */
static outbox_status
exec_plain(struct obx_ledger *ledger, const char *sql, const char *doing, outbox_error *err)
{
    PGresult *res = PQexec(ledger->conn, sql);
    outbox_status status = obx_ledger_check(ledger, res, doing, err);

    PQclear(res);
    return status;
}

/* OUTBOX_ENOTXN unless a transaction is open; `aborted_ok` also accepts a failed one. */
outbox_status
obx_ledger_require_transaction(struct obx_ledger *ledger, int aborted_ok, const char *doing,
                               outbox_error *err)
{
    PGTransactionStatusType tx;
    outbox_status status = obx_ledger_require_connection(ledger, err);

    if (status != OUTBOX_OK) {
        return status;
    }
    tx = PQtransactionStatus(ledger->conn);
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
    status = obx_ledger_require_connection(ledger, err);
    if (status != OUTBOX_OK) {
        return status;
    }
    if (PQtransactionStatus(ledger->conn) != PQTRANS_IDLE) {
        return obx_fail(err, OUTBOX_EINVAL, "begin: a transaction is already open");
    }
    return exec_plain(ledger, "BEGIN ISOLATION LEVEL READ COMMITTED", "begin", err);
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
    if (PQtransactionStatus(ledger->conn) == PQTRANS_INERROR) {
        obx_ledger_rollback(ledger);
        status =
            obx_fail(err, OUTBOX_EDB, "commit: the transaction had failed and was rolled back");
        if (err != NULL) {
            snprintf(err->sqlstate, sizeof(err->sqlstate), "%s", "25P02");
        }
        return status;
    }
    return exec_plain(ledger, "COMMIT", "commit", err);
}

void
obx_ledger_rollback(struct obx_ledger *ledger)
{
    PGTransactionStatusType tx;

    if (ledger == NULL || ledger->conn == NULL || PQstatus(ledger->conn) != CONNECTION_OK) {
        return; /* a lost connection took its transaction with it */
    }
    tx = PQtransactionStatus(ledger->conn);
    if (tx == PQTRANS_INTRANS || tx == PQTRANS_INERROR) {
        PQclear(PQexec(ledger->conn, "ROLLBACK"));
    }
}

outbox_status
obx_ledger_savepoint(struct obx_ledger *ledger, outbox_error *err)
{
    outbox_status status;

    obx_error_reset(err);
    status = obx_ledger_require_transaction(ledger, 0, "savepoint", err);
    if (status != OUTBOX_OK) {
        return status;
    }
    return exec_plain(ledger, "SAVEPOINT " EVENT_SAVEPOINT, "savepoint", err);
}

outbox_status
obx_ledger_release_savepoint(struct obx_ledger *ledger, outbox_error *err)
{
    outbox_status status;

    obx_error_reset(err);
    status = obx_ledger_require_transaction(ledger, 0, "release savepoint", err);
    if (status != OUTBOX_OK) {
        return status;
    }
    return exec_plain(ledger, "RELEASE SAVEPOINT " EVENT_SAVEPOINT, "release savepoint", err);
}

/* Undoes what followed the savepoint, which stays in place (SQL's ROLLBACK TO). */
outbox_status
obx_ledger_rollback_to_savepoint(struct obx_ledger *ledger, outbox_error *err)
{
    outbox_status status;

    obx_error_reset(err);
    status = obx_ledger_require_transaction(ledger, 1, "roll back to savepoint", err);
    if (status != OUTBOX_OK) {
        return status;
    }
    return exec_plain(ledger, "ROLLBACK TO SAVEPOINT " EVENT_SAVEPOINT, "roll back to savepoint",
                      err);
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
    res = PQexecParams(ledger->conn, statement, 1, types, params, NULL, NULL, 0);
    st = PQresultStatus(res);
    if (st == PGRES_EMPTY_QUERY) {
        status = obx_fail(err, OUTBOX_EINVAL, "handler statement is empty");
    } else if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        status = obx_fail_pg_handler(err, ledger->conn, res, "handler statement failed");
    }
    PQclear(res);
    return status;
}

outbox_status
obx_ledger_prune(struct obx_ledger *ledger, long long retention_seconds, int limit, size_t *deleted,
                 outbox_error *err)
{
    char retention_text[24], limit_text[16];
    const char *params[] = {retention_text, limit_text};
    PGresult *res;
    outbox_status status;

    obx_error_reset(err);
    if (retention_seconds < 0 || limit < 1) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "prune ledger: retention_seconds %lld must be >= 0 and limit %d >= 1",
                        retention_seconds, limit);
    }
    status = obx_ledger_require_connection(ledger, err);
    if (status != OUTBOX_OK) {
        return status;
    }
    snprintf(retention_text, sizeof(retention_text), "%lld", retention_seconds);
    snprintf(limit_text, sizeof(limit_text), "%d", limit);
    res = obx_ledger_exec(ledger, OBX_LEDGER_PRUNE, params, 2);
    status = obx_ledger_check(ledger, res, "prune ledger", err);
    if (status == OUTBOX_OK) {
        *deleted = (size_t)strtoul(PQcmdTuples(res), NULL, 10);
    }
    PQclear(res);
    return status;
}

PGconn *
obx_ledger_connection(struct obx_ledger *ledger)
{
    return ledger->conn;
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
