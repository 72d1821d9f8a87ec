/* SPDX-License-Identifier: MIT */
/*
 * handler_sql_pg.c - a declared `sql:` handler: the statement runs on the
 * ledger's connection, inside the ledger's transaction, with $1 = the
 * envelope as jsonb. Its effects commit with the claim and the `done`
 * mark, or not at all.
 */
#include <string.h>

#include "error.h"
#include "handlers.h"

#include "banned.h" /* last: poisons unsafe functions */

#define JSONB_OID 3802 /* so $1->>'id' needs no cast in the statement */

outbox_handler_result
obx_sql_handler(void *ctx, PGconn *conn, const outbox_delivery *d, outbox_error *err)
{
    const char *statement = ctx;
    const char *params[] = {outbox_delivery_envelope(d, NULL)};
    const Oid types[] = {JSONB_OID};
    PGresult *res = PQexecParams(conn, statement, 1, types, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(res);
    outbox_handler_result result = OUTBOX_HANDLER_DONE;

    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        const char *sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);

        /*
         * Not the handler's failure, so no attempt is spent: a lost connection
         * (an outage), and class 40 (a deadlock or serialization failure with
         * a concurrent transaction), which goes away when tried again.
         */
        result = obx_fail_pg(err, conn, res, "sql handler") == OUTBOX_EUNAVAILABLE ||
                         (sqlstate != NULL && strncmp(sqlstate, "40", 2) == 0)
                     ? OUTBOX_HANDLER_RETRY
                     : OUTBOX_HANDLER_FAIL;
    }
    PQclear(res);
    return result;
}
