/* SPDX-License-Identifier: MIT */
/*
 * pg_session_pg.c - the one PostgreSQL session the store and the ledger
 * each keep: statements rendered once for the schema, a connection made
 * and remade through obx_pg_target_connect(), and the checks every
 * statement goes through, alone or several in one round trip (libpq's
 * pipeline mode: the window claim's transaction). A lost connection is
 * OUTBOX_EUNAVAILABLE, so it spends no attempt anywhere above.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "common/error.h"
#include "common/error_pg.h"
#include "common/sql.h"
#include "pg_conn.h"

#include "common/banned.h" /* last: poisons unsafe functions */

outbox_status
obx_pg_session_init(struct obx_pg_session *s, const char *conninfo, const char *application_name,
                    const char *schema, const char *const *templates, size_t count,
                    outbox_error *err)
{
    outbox_status status;

    memset(s, 0, sizeof(*s));
    if (count > OBX_PG_SESSION_MAX_SQL) {
        return obx_fail(err, OUTBOX_EINVAL, "at most %d statements per session",
                        OBX_PG_SESSION_MAX_SQL);
    }
    status = obx_pg_target_init(&s->target, conninfo, application_name, schema, err);
    if (status == OUTBOX_OK) {
        status = obx_sql_render_set(schema, templates, count, s->sql, err);
    }
    if (status == OUTBOX_OK) {
        s->sql_count = count;
    }
    return status;
}

void
obx_pg_session_fini(struct obx_pg_session *s)
{
    PQfinish(s->conn);
    s->conn = NULL;
    obx_sql_free_set(s->sql, OBX_PG_SESSION_MAX_SQL);
    obx_pg_target_fini(&s->target);
}

outbox_status
obx_pg_session_connect(struct obx_pg_session *s, outbox_error *err)
{
    s->prepared = 0;
    return obx_pg_target_connect(&s->target, &s->conn, err);
}

outbox_status
obx_pg_session_require(struct obx_pg_session *s, outbox_error *err)
{
    if (s->conn == NULL || PQstatus(s->conn) != CONNECTION_OK) {
        return obx_fail(err, OUTBOX_EUNAVAILABLE, "not connected to postgresql: reconnect first");
    }
    return OUTBOX_OK;
}

/* SQLSTATE of a failed result, "" for none. */
static const char *
result_sqlstate(const PGresult *res)
{
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

    return state != NULL ? state : "";
}

const char *
obx_pg_session_statement_name(size_t which, char name[OBX_PG_STATEMENT_NAME_CAP])
{
    snprintf(name, OBX_PG_STATEMENT_NAME_CAP, "obx_sql_%zu", which);
    return name;
}

/*
 * Prepares sql[which] unless it is; NULL when done, else the failed
 * result. A statement of that name left from before (its cached plan went
 * stale) is dropped first.
 */
static PGresult *
prepare(struct obx_pg_session *s, size_t which, int nparams)
{
    char name[OBX_PG_STATEMENT_NAME_CAP], drop[OBX_PG_STATEMENT_NAME_CAP + 16];
    PGresult *res;

    if (s->prepared & (1u << which)) {
        return NULL;
    }
    obx_pg_session_statement_name(which, name);
    res = PQprepare(s->conn, name, s->sql[which], nparams, NULL);
    if (PQresultStatus(res) != PGRES_COMMAND_OK &&
        strcmp(result_sqlstate(res), "42P05") == 0) { /* duplicate_prepared_statement */
        PQclear(res);
        snprintf(drop, sizeof(drop), "DEALLOCATE %s", name);
        PQclear(PQexec(s->conn, drop));
        res = PQprepare(s->conn, name, s->sql[which], nparams, NULL);
    }
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        return res;
    }
    PQclear(res);
    s->prepared |= 1u << which;
    return NULL;
}

outbox_status
obx_pg_session_prepare(struct obx_pg_session *s, size_t which, int nparams, outbox_error *err)
{
    PGresult *res = prepare(s, which, nparams);
    outbox_status status = res == NULL ? OUTBOX_OK : obx_pg_session_check(s, res, "prepare", err);

    PQclear(res);
    return status;
}

PGresult *
obx_pg_session_exec(struct obx_pg_session *s, size_t which, const char *const *params, int nparams)
{
    char name[OBX_PG_STATEMENT_NAME_CAP];
    PGresult *res;
    const char *state;

    if (!s->use_prepared) {
        return PQexecParams(s->conn, s->sql[which], nparams, NULL, params, NULL, NULL, 0);
    }
    for (int attempt = 0;; attempt++) {
        if ((res = prepare(s, which, nparams)) != NULL) {
            return res;
        }
        res = PQexecPrepared(s->conn, obx_pg_session_statement_name(which, name), nparams, params,
                             NULL, NULL, 0);
        state = result_sqlstate(res);
        /* invalid_sql_statement_name: forgotten; feature_not_supported: a stale cached plan */
        if (strcmp(state, "26000") != 0 && strcmp(state, "0A000") != 0) {
            return res;
        }
        s->prepared &= ~(1u << which);
        /* It did not run: outside a transaction nothing else was undone, so run it again. */
        if (attempt > 0 || PQtransactionStatus(s->conn) != PQTRANS_IDLE) {
            return res;
        }
        PQclear(res);
    }
}

outbox_status
obx_pg_session_check(struct obx_pg_session *s, const PGresult *res, const char *doing,
                     outbox_error *err)
{
    ExecStatusType st = PQresultStatus(res);

    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
        return OUTBOX_OK;
    }
    return obx_fail_pg(err, s->conn, res, doing);
}

outbox_status
obx_pg_session_run(struct obx_pg_session *s, size_t which, const char *const *params, int nparams,
                   const char *doing, outbox_error *err)
{
    PGresult *res = obx_pg_session_exec(s, which, params, nparams);
    outbox_status status = obx_pg_session_check(s, res, doing, err);

    PQclear(res);
    return status;
}

outbox_status
obx_pg_session_prune(struct obx_pg_session *s, size_t which, long long retention_seconds, int limit,
                     char *after, const char *doing, size_t *deleted, outbox_error *err)
{
    char retention_text[24], limit_text[16];
    const char *params[] = {retention_text, limit_text, after != NULL && after[0] ? after : NULL};
    PGresult *res;
    outbox_status status;

    if (retention_seconds < 0 || limit < 1) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "%s: retention_seconds %lld must be >= 0 and limit %d >= 1", doing,
                        retention_seconds, limit);
    }
    status = obx_pg_session_require(s, err);
    if (status != OUTBOX_OK) {
        return status;
    }
    snprintf(retention_text, sizeof(retention_text), "%lld", retention_seconds);
    snprintf(limit_text, sizeof(limit_text), "%d", limit);
    res = obx_pg_session_exec(s, which, params, 3);
    status = obx_pg_session_check(s, res, doing, err);
    if (status == OUTBOX_OK && PQntuples(res) == 1) {
        const char *last = PQgetvalue(res, 0, 1);
        size_t len = strlen(last);

        *deleted = (size_t)strtoul(PQgetvalue(res, 0, 0), NULL, 10);
        /* Where this batch stopped; kept as it was when it took nothing. */
        if (after != NULL && !PQgetisnull(res, 0, 1) && len < OBX_PRUNE_AFTER_CAP) {
            memcpy(after, last, len + 1);
        }
    } else if (status == OUTBOX_OK) {
        status = obx_fail(err, OUTBOX_EDB, "%s: no result row", doing);
    }
    PQclear(res);
    return status;
}

/* Pipelines: several statements of a session in one round trip (libpq pipeline mode). */

/* Queues one step; 0 when libpq refused it (the connection is gone). */
static int
send_step(struct obx_pg_session *s, const struct obx_pg_step *step)
{
    char name[OBX_PG_STATEMENT_NAME_CAP];

    if (step->text != NULL) {
        return PQsendQueryParams(s->conn, step->text, step->nparams, NULL, step->params, NULL, NULL,
                                 0);
    }
    if (!s->use_prepared) {
        return PQsendQueryParams(s->conn, s->sql[step->which], step->nparams, NULL, step->params,
                                 NULL, NULL, 0);
    }
    return PQsendQueryPrepared(s->conn, obx_pg_session_statement_name(step->which, name),
                               step->nparams, step->params, NULL, NULL, 0);
}

/* Reads one step's result and the NULL that ends it; a lost connection's failure if none. */
static PGresult *
read_step(struct obx_pg_session *s)
{
    PGresult *res = PQgetResult(s->conn);
    PGresult *extra;

    if (res == NULL) {
        return PQmakeEmptyPGresult(s->conn, PGRES_FATAL_ERROR);
    }
    while ((extra = PQgetResult(s->conn)) != NULL) {
        PQclear(extra); /* a statement's second result: none of ours has one */
    }
    return res;
}

/*
 * Forgets the steps' statements when the server did not know one (a
 * pooler's DISCARD ALL forgets them all) or one's plan went stale: they
 * are prepared anew next time. Only the first failure has a SQLSTATE; the
 * steps after it were not run.
 */
static void
forget_unknown(struct obx_pg_session *s, const struct obx_pg_step *steps, size_t n,
               PGresult *const *res)
{
    int lost = 0;

    for (size_t i = 0; i < n; i++) {
        const char *state = PQresultErrorField(res[i], PG_DIAG_SQLSTATE);

        lost |= state != NULL && (strcmp(state, "26000") == 0 || strcmp(state, "0A000") == 0);
    }
    for (size_t i = 0; i < n && lost; i++) {
        if (steps[i].text == NULL) {
            s->prepared &= ~(1u << steps[i].which);
        }
    }
}

outbox_status
obx_pg_session_pipeline(struct obx_pg_session *s, const struct obx_pg_step *steps, size_t n,
                        PGresult **res, outbox_error *err)
{
    int sent = 1;
    PGresult *sync;

    memset(res, 0, n * sizeof(*res));
    for (size_t i = 0; i < n; i++) {
        if (steps[i].text == NULL && s->use_prepared &&
            obx_pg_session_prepare(s, steps[i].which, steps[i].nparams, err) != OUTBOX_OK) {
            return err->code;
        }
    }
    if (!PQenterPipelineMode(s->conn)) {
        return obx_fail_pg(err, s->conn, NULL, "enter pipeline mode");
    }
    for (size_t i = 0; i < n && sent; i++) {
        sent = send_step(s, &steps[i]);
    }
    if (!sent || !PQpipelineSync(s->conn)) {
        /* Nothing can be read back in order: the connection is dropped by the caller. */
        return obx_fail(err, OUTBOX_EUNAVAILABLE, "pipeline: %s", PQerrorMessage(s->conn));
    }
    for (size_t i = 0; i < n; i++) {
        res[i] = read_step(s);
    }
    sync = PQgetResult(s->conn);
    if (PQresultStatus(sync) != PGRES_PIPELINE_SYNC) {
        PQclear(sync);
        return obx_fail(err, OUTBOX_EUNAVAILABLE, "pipeline: no sync: %s", PQerrorMessage(s->conn));
    }
    PQclear(sync);
    forget_unknown(s, steps, n, res);
    if (!PQexitPipelineMode(s->conn)) {
        return obx_fail_pg(err, s->conn, NULL, "leave pipeline mode");
    }
    return OUTBOX_OK;
}
