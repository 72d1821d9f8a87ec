/* SPDX-License-Identifier: MIT */
/*
 * fleet_lock_pg.c - the ownership lock's connection (fleet_lock.h).
 */
#include "fleet_lock.h"

#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "common/error.h"
#include "common/error_pg.h"
#include "sql_gen.h"
#include "support/pg_conn.h"

#include "common/banned.h" /* last: poisons unsafe functions */

struct obx_fleet_lock {
    PGconn *conn;
    char *schema;
};

/* The one boolean or count a lock statement answers; -1 with `err` set on failure. */
static long long
ask(PGconn *conn, const char *sql, const char *schema, const char *doing, outbox_error *err)
{
    const char *params[] = {schema};
    PGresult *res = PQexecParams(conn, sql, 1, NULL, params, NULL, NULL, 0);
    long long value = -1;

    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        obx_fail_pg(err, conn, res, doing);
        obx_pg_one_line(err);
    } else {
        const char *v = PQgetvalue(res, 0, 0);

        value = strcmp(v, "t") == 0 ? 1 : strcmp(v, "f") == 0 ? 0 : strtoll(v, NULL, 10);
    }
    PQclear(res);
    return value;
}

outbox_status
obx_fleet_lock_take(const char *conninfo, const char *application_name, const char *schema,
                    struct obx_fleet_lock **out, outbox_error *err)
{
    PGconn *conn = NULL;
    outbox_status st = obx_pg_connect(conninfo, application_name, &conn, err);
    long long got;
    struct obx_fleet_lock *lock;

    *out = NULL;
    if (st != OUTBOX_OK) {
        return st;
    }
    got = ask(conn, obx_sql_fleet_lock_take, schema, "take the fleet ownership lock", err);
    if (got != 1) {
        st = got < 0 ? err->code : OUTBOX_OK;
        PQfinish(conn);
        return st;
    }
    lock = calloc(1, sizeof(*lock));
    if (lock == NULL || (lock->schema = strdup(schema)) == NULL) {
        free(lock);
        PQfinish(conn);
        return obx_fail(err, OUTBOX_ENOMEM, "fleet lock: out of memory");
    }
    lock->conn = conn;
    *out = lock;
    return OUTBOX_OK;
}

outbox_status
obx_fleet_lock_check(struct obx_fleet_lock *lock, outbox_error *err)
{
    long long held;

    if (PQstatus(lock->conn) != CONNECTION_OK) {
        return obx_fail(err, OUTBOX_EUNAVAILABLE, "fleet lock connection lost");
    }
    held = ask(lock->conn, obx_sql_fleet_lock_check, lock->schema, "check the fleet lock", err);
    if (held < 0) {
        return err->code != OUTBOX_OK ? err->code : OUTBOX_EUNAVAILABLE;
    }
    if (held == 0) {
        return obx_fail(err, OUTBOX_EUNAVAILABLE, "fleet lock no longer held by this session");
    }
    return OUTBOX_OK;
}

void
obx_fleet_lock_release(struct obx_fleet_lock *lock)
{
    if (lock == NULL) {
        return;
    }
    PQfinish(lock->conn);
    free(lock->schema);
    free(lock);
}
