/* SPDX-License-Identifier: MIT */
/*
 * error_pg.c - libpq's failures as outbox_error, classified by meaning:
 * what the caller should do next, never where the error came from.
 */
#include "error_pg.h"

#include <stdio.h>
#include <string.h>

#include "error.h"

#include "banned.h" /* last: poisons unsafe functions */

/*
 * SQLSTATEs that mean "the server cannot serve now" whatever the statement:
 * out of resources (53), shutdown (57P01-03), and our own statement_timeout
 * (57014) and lock_timeout (55P03). Retrying later is right for all of
 * them, and none may spend an attempt. Class 08 (connection exception) is
 * not among them: it names a failure only when the connection is gone
 * (connection_lost), and on a live connection it is the statement's own
 * fault - 08P01 for a statement bound with the wrong number of parameters,
 * 08001 from dblink or postgres_fdw reaching another server - which must
 * not be retried forever as if the database were away.
 */
static int
sqlstate_is_transient(const char *sqlstate)
{
    if (sqlstate == NULL || strlen(sqlstate) != 5) {
        return 0;
    }
    return strncmp(sqlstate, "53", 2) == 0 || strcmp(sqlstate, "57P01") == 0 ||
           strcmp(sqlstate, "57P02") == 0 || strcmp(sqlstate, "57P03") == 0 ||
           strcmp(sqlstate, "57014") == 0 || strcmp(sqlstate, "55P03") == 0;
}

/*
 * The session is over: no connection, libpq saw it break, or the server
 * ended it (a FATAL or PANIC error closes the session, and libpq may not
 * have read the end of the socket yet).
 */
static int
connection_lost(PGconn *conn, const PGresult *res)
{
    const char *severity = res ? PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED) : NULL;

    return conn == NULL || PQstatus(conn) != CONNECTION_OK ||
           (severity != NULL && (strcmp(severity, "FATAL") == 0 || strcmp(severity, "PANIC") == 0));
}

/* libpq messages end in a newline; ours never do. */
static void
trim_newline(char *s)
{
    size_t len = strlen(s);

    while (len > 0 && (s[len - 1] == '\n' || s[len - 1] == ' ')) {
        s[--len] = '\0';
    }
}

outbox_status
obx_fail_pg(outbox_error *err, PGconn *conn, const PGresult *res, const char *doing)
{
    const char *sqlstate = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    const char *reason = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    outbox_status code = OUTBOX_EDB;

    if (connection_lost(conn, res) || sqlstate_is_transient(sqlstate)) {
        code = OUTBOX_EUNAVAILABLE;
    }
    if (err == NULL || err->code != OUTBOX_OK) {
        return code;
    }
    if (reason == NULL) {
        reason = conn != NULL ? PQerrorMessage(conn) : "no connection";
    }
    if (reason[0] == '\0') {
        reason = "connection lost";
    }
    obx_fail(err, code, "%s: %s", doing, reason);
    trim_newline(err->message);
    snprintf(err->sqlstate, sizeof(err->sqlstate), "%s", sqlstate ? sqlstate : "");
    return code;
}

outbox_status
obx_fail_pg_handler(outbox_error *err, PGconn *conn, const PGresult *res, const char *doing)
{
    const char *sqlstate = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    outbox_status status = obx_fail_pg(err, conn, res, doing);
    int timed_out = sqlstate != NULL && !connection_lost(conn, res) &&
                    (strcmp(sqlstate, "57014") == 0 || strcmp(sqlstate, "55P03") == 0);

    if (status == OUTBOX_EDB || (status == OUTBOX_EUNAVAILABLE && timed_out)) {
        status = OUTBOX_EREJECTED;
        if (err != NULL && err->code != OUTBOX_OK) {
            err->code = status;
        }
    }
    return status;
}

outbox_status
obx_pg_exec(PGconn *conn, const char *sql, const char *doing, outbox_error *err)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);
    outbox_status status = OUTBOX_OK;

    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        status = obx_fail_pg(err, conn, res, doing);
    }
    PQclear(res);
    return status;
}
