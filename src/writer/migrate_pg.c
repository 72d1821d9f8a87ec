/* SPDX-License-Identifier: MIT */
/*
 * migrate_pg.c - applies the embedded forward-only migrations.
 *
 * A new schema is made in one transaction: every migration, then ordering
 * switched on (the default for new schemas). An existing schema is brought
 * up one migration per transaction and keeps its ordering setting. Every
 * transaction holds a transaction-scoped advisory lock keyed by the schema
 * name, so any number of processes can migrate at once: the first applies,
 * the others wait, see the version rows and do nothing. Creating the schema
 * and the version table happens under the same lock, because CREATE ... IF
 * NOT EXISTS is not safe against a concurrent CREATE (it fails with 23505
 * instead of skipping).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/error_pg.h"
#include "common/sql.h"
#include "sql_gen.h"
#include "writer_internal.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* First half of the advisory lock key: "obxm"; the second is the schema's hash. */
#define MIGRATE_LOCK_CLASS "1868724333"

/*
 * Settings for the migration's own transaction only. A waiting migrator
 * gives up after a minute rather than queue forever. Notices stay off: a
 * re-run's "already exists, skipping" would reach the caller's notice
 * processor, and libpq's default one prints to stderr.
 */
#define MIGRATE_SETTINGS "SET LOCAL lock_timeout = '60s'; SET LOCAL client_min_messages = warning"

/* Renders `sql_template` for the schema and runs it. */
static outbox_status
exec_rendered(PGconn *conn, const char *sql_template, const char *quoted, const char *doing,
              outbox_error *err)
{
    char *sql = obx_sql_render(sql_template, quoted);
    outbox_status status;

    if (sql == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "%s: out of memory", doing);
    }
    status = obx_pg_exec(conn, sql, doing, err);
    free(sql);
    return status;
}

/* Takes the lock and makes sure the schema and its version table exist. */
static outbox_status
lock_and_prepare(PGconn *conn, const char *schema, const char *quoted, outbox_error *err)
{
    const char *params[] = {schema};
    PGresult *res;
    char create_schema[128];
    outbox_status status;

    status = obx_pg_exec(conn, MIGRATE_SETTINGS, "migrate: settings", err);
    if (status != OUTBOX_OK) {
        return status;
    }
    res = PQexecParams(conn, "SELECT pg_advisory_xact_lock(" MIGRATE_LOCK_CLASS ", hashtext($1))",
                       1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        status = obx_fail_pg(err, conn, res, "migrate: take the migration lock");
    }
    PQclear(res);
    if (status != OUTBOX_OK) {
        return status;
    }
    /* `quoted` ends in a dot; CREATE SCHEMA wants the bare quoted name. */
    snprintf(create_schema, sizeof(create_schema), "CREATE SCHEMA IF NOT EXISTS %.*s",
             (int)strlen(quoted) - 1, quoted);
    status = obx_pg_exec(conn, create_schema, "migrate: create schema", err);
    if (status != OUTBOX_OK) {
        return status;
    }
    return exec_rendered(conn,
                         "CREATE TABLE IF NOT EXISTS /*schema*/schema_migrations ("
                         " version integer PRIMARY KEY,"
                         " name text NOT NULL,"
                         " applied_at timestamptz NOT NULL DEFAULT now())",
                         quoted, "migrate: create schema_migrations", err);
}

/* Sets `*done` when `version` already has its row. */
static outbox_status
is_applied(PGconn *conn, const char *quoted, int version, int *done, outbox_error *err)
{
    char *sql =
        obx_sql_render("SELECT 1 FROM /*schema*/schema_migrations WHERE version = $1", quoted);
    char version_text[16];
    const char *params[] = {version_text};
    PGresult *res;
    outbox_status status = OUTBOX_OK;

    if (sql == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "migrate: out of memory");
    }
    snprintf(version_text, sizeof(version_text), "%d", version);
    res = PQexecParams(conn, sql, 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        status = obx_fail_pg(err, conn, res, "migrate: read schema_migrations");
    } else {
        *done = PQntuples(res) > 0;
    }
    PQclear(res);
    free(sql);
    return status;
}

static outbox_status
record_applied(PGconn *conn, const char *quoted, const struct obx_migration *m, outbox_error *err)
{
    char *sql = obx_sql_render(
        "INSERT INTO /*schema*/schema_migrations (version, name) VALUES ($1, $2)", quoted);
    char version_text[16];
    const char *params[] = {version_text, m->name};
    PGresult *res;
    outbox_status status = OUTBOX_OK;

    if (sql == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "migrate: out of memory");
    }
    snprintf(version_text, sizeof(version_text), "%d", m->version);
    res = PQexecParams(conn, sql, 2, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        status = obx_fail_pg(err, conn, res, "migrate: record version");
    }
    PQclear(res);
    free(sql);
    return status;
}

/*
 * One transaction under the lock. On a schema that has never been migrated
 * it applies every migration through `last_version` and switches ordering
 * on, so a new schema appears whole, ordered, or not at all; a process that
 * dies half-way leaves nothing behind. On an existing schema it applies the
 * first migration not yet recorded and leaves ordering as the operator set
 * it. `*applied` counts what this transaction committed.
 */
static outbox_status
migrate_step(PGconn *conn, const char *schema, const char *quoted, int last_version, int *applied,
             outbox_error *err)
{
    char doing[96];
    int count = 0, last_applied = 0, is_new = 0, done = 0;
    outbox_status status = obx_pg_exec(conn, "BEGIN", "migrate: begin", err);

    if (status == OUTBOX_OK) {
        status = lock_and_prepare(conn, schema, quoted, err);
    }
    if (status == OUTBOX_OK) {
        status = is_applied(conn, quoted, obx_migrations[0].version, &done, err);
        is_new = !done;
    }
    for (int i = 0; status == OUTBOX_OK && i < obx_migration_count; i++) {
        const struct obx_migration *m = &obx_migrations[i];

        if (m->version > last_version || (count > 0 && !is_new)) {
            break;
        }
        status = is_applied(conn, quoted, m->version, &done, err);
        if (status != OUTBOX_OK || done) {
            continue;
        }
        snprintf(doing, sizeof(doing), "migrate: apply %04d_%s", m->version, m->name);
        status = exec_rendered(conn, m->sql, quoted, doing, err);
        if (status == OUTBOX_OK) {
            status = record_applied(conn, quoted, m, err);
            count++;
            last_applied = m->version;
        }
    }
    if (status == OUTBOX_OK && is_new && last_applied >= OBX_ORDERING_FIRST_VERSION) {
        status = exec_rendered(conn, "SELECT /*schema*/set_ordering(true)", quoted,
                               "migrate: switch a new schema's ordering on", err);
    }
    if (status == OUTBOX_OK) {
        status = obx_pg_exec(conn, "COMMIT", "migrate: commit", err);
    }
    if (status == OUTBOX_OK) {
        *applied = count;
    } else {
        PQclear(PQexec(conn, "ROLLBACK"));
    }
    return status;
}

outbox_status
obx_migrate_through(PGconn *conn, const char *schema, int last_version, int *applied,
                    outbox_error *err)
{
    char quoted[OBX_SCHEMA_QUOTED_CAP];
    int total = 0, step = 1;
    outbox_status status;

    obx_error_reset(err);
    if (schema == NULL) {
        schema = "outbox";
    }
    status = obx_sql_quote_schema(schema, quoted, err);
    if (status != OUTBOX_OK) {
        return status;
    }
    if (conn == NULL || PQstatus(conn) != CONNECTION_OK) {
        return obx_fail(err, OUTBOX_EUNAVAILABLE, "migrate: no database connection");
    }
    if (PQtransactionStatus(conn) != PQTRANS_IDLE) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "migrate: the connection is inside a transaction; migrate runs its own");
    }
    while (status == OUTBOX_OK && step > 0) {
        status = migrate_step(conn, schema, quoted, last_version, &step, err);
        total += status == OUTBOX_OK ? step : 0;
    }
    if (status == OUTBOX_OK && applied != NULL) {
        *applied = total;
    }
    return status;
}

outbox_status
outbox_migrate(PGconn *conn, const char *schema, int *applied, outbox_error *err)
{
    return obx_migrate_through(conn, schema, INT_MAX, applied, err);
}
