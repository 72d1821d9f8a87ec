/* SPDX-License-Identifier: MIT */
/*
 * demo_db_pg.c - the demo's side of the database: its business tables,
 * the counts of the progress line, and the committed events the audit
 * compares with the stream.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "common/sql.h"
#include "demo.h"
#include "demo_pg.h"
#include "sql_gen.h"

#include "common/banned.h" /* last: poisons unsafe functions */

struct obx_demo_db {
    PGconn *conn;
    char *counts_sql; /* demo_counts.sql for the schema */
    char *audit_sql;  /* demo_audit.sql for the schema */
};

int
obx_demo_exec_ok(PGconn *conn, const char *sql, int nparams, const char *const *params)
{
    PGresult *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
    int ok = PQresultStatus(res) == PGRES_COMMAND_OK;

    PQclear(res);
    return ok;
}

/*
 * The handler's order starts before the first event is written, as for a
 * service whose consumers run before its writers: without it the first
 * claim would take it, after some events went out, and those would run
 * unordered. Taken once per handler name; later runs keep it.
 */
static int
take_baseline(PGconn *conn, const char *schema)
{
    char quoted[OBX_SCHEMA_QUOTED_CAP];
    const char *params[] = {OBX_DEMO_HANDLER_NAME};
    char *sql;
    PGresult *res;
    int ok;

    if (obx_sql_quote_schema(schema, quoted, NULL) != OUTBOX_OK ||
        (sql = obx_sql_render("SELECT /*schema*/ledger_order_baseline($1)", quoted)) == NULL) {
        return 0;
    }
    res = PQexecParams(conn, sql, 1, NULL, params, NULL, NULL, 0);
    ok = PQresultStatus(res) == PGRES_TUPLES_OK;
    PQclear(res);
    free(sql);
    return ok;
}

int
obx_demo_prepare_db(const char *database_url, const char *schema)
{
    PGconn *conn = PQconnectdb(database_url);
    outbox_error err;
    int ok =
        PQstatus(conn) == CONNECTION_OK && outbox_migrate(conn, schema, NULL, &err) == OUTBOX_OK &&
        obx_demo_exec_ok(conn,
                         "CREATE TABLE IF NOT EXISTS demo_reviews (id uuid PRIMARY KEY, "
                         "movie_id uuid NOT NULL, stars integer NOT NULL, body text, "
                         "event_id uuid NOT NULL UNIQUE)",
                         0, NULL) &&
        obx_demo_exec_ok(conn, "DROP TABLE IF EXISTS demo_movie_stats", 0, NULL) &&
        obx_demo_exec_ok(conn,
                         "CREATE TABLE demo_movie_stats (movie_id uuid PRIMARY KEY, "
                         "reviews bigint NOT NULL, stars bigint NOT NULL, last_seq bigint, "
                         "out_of_order bigint NOT NULL DEFAULT 0)",
                         0, NULL) &&
        obx_demo_exec_ok(conn, "TRUNCATE demo_reviews", 0, NULL) && take_baseline(conn, schema);

    if (!ok) {
        fprintf(stderr, "outboxd demo: cannot prepare the database: %s\n",
                PQstatus(conn) != CONNECTION_OK ? "no connection" : err.message);
    }
    PQfinish(conn);
    return ok ? 0 : -1;
}

struct obx_demo_db *
obx_demo_db_open(const char *database_url, const char *schema)
{
    char quoted[OBX_SCHEMA_QUOTED_CAP];
    struct obx_demo_db *db = calloc(1, sizeof(*db));

    if (db == NULL || obx_sql_quote_schema(schema, quoted, NULL) != OUTBOX_OK) {
        free(db);
        return NULL;
    }
    db->counts_sql = obx_sql_render(obx_sql_demo_counts, quoted);
    db->audit_sql = obx_sql_render(obx_sql_demo_audit, quoted);
    db->conn = PQconnectdb(database_url);
    if (db->counts_sql == NULL || db->audit_sql == NULL || PQstatus(db->conn) != CONNECTION_OK) {
        obx_demo_db_close(db);
        return NULL;
    }
    return db;
}

void
obx_demo_db_close(struct obx_demo_db *db)
{
    if (db != NULL) {
        PQfinish(db->conn);
        free(db->counts_sql);
        free(db->audit_sql);
        free(db);
    }
}

int
obx_demo_db_counts(struct obx_demo_db *db, struct obx_demo_counts *out)
{
    PGresult *res = PQexec(db->conn, db->counts_sql);
    int ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1;

    if (ok) {
        out->done = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        out->waiting = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
        out->stuck = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
        out->handled = strtoll(PQgetvalue(res, 0, 3), NULL, 10);
        out->ledger_done = strtoll(PQgetvalue(res, 0, 4), NULL, 10);
        out->out_of_order = strtoll(PQgetvalue(res, 0, 5), NULL, 10);
        out->ordered = strcmp(PQgetvalue(res, 0, 6), "t") == 0;
    }
    PQclear(res);
    return ok ? 0 : -1;
}

int
obx_demo_db_audit(struct obx_demo_db *db, obx_demo_audit_fn each, void *ctx)
{
    PGresult *res = PQexec(db->conn, db->audit_sql);
    int ok = PQresultStatus(res) == PGRES_TUPLES_OK;

    for (int i = 0; ok && i < PQntuples(res); i++) {
        each(ctx, PQgetvalue(res, i, 0), PQgetisnull(res, i, 1) ? "" : PQgetvalue(res, i, 1));
    }
    PQclear(res);
    return ok ? 0 : -1;
}
