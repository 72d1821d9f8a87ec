/* SPDX-License-Identifier: MIT */
/*
 * status_pg.c - reads the outbox's counts for `outboxctl status`.
 */
#include "status.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/error_pg.h"
#include "common/sql.h"
#include "sql_gen.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static long long
column_ll(PGresult *res, const char *name)
{
    int col = PQfnumber(res, name);

    return col < 0 ? 0 : strtoll(PQgetvalue(res, 0, col), NULL, 10);
}

outbox_status
obx_status_read(PGconn *conn, const char *schema, struct obx_status *out, outbox_error *err)
{
    char quoted[OBX_SCHEMA_QUOTED_CAP];
    char *sql;
    PGresult *res;
    outbox_status st = obx_sql_quote_schema(schema, quoted, err);

    if (st != OUTBOX_OK) {
        return st;
    }
    sql = obx_sql_render(obx_sql_status_counts, quoted);
    if (sql == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "status: out of memory");
    }
    res = PQexecParams(conn, sql, 0, NULL, NULL, NULL, NULL, 0);
    free(sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        st = obx_fail_pg(err, conn, res, "status");
        PQclear(res);
        return st;
    }
    memset(out, 0, sizeof(*out));
    out->pending = column_ll(res, "pending");
    out->leased = column_ll(res, "leased");
    out->done = column_ll(res, "done");
    out->dead = column_ll(res, "dead");
    out->invalid = column_ll(res, "invalid");
    out->backing_off = column_ll(res, "backing_off");
    out->dead_letters = column_ll(res, "dead_letters");
    out->schema_version = column_ll(res, "schema_version");
    out->oldest_pending_age_s =
        strtod(PQgetvalue(res, 0, PQfnumber(res, "oldest_pending_age_s")), NULL);
    PQclear(res);
    return OUTBOX_OK;
}
