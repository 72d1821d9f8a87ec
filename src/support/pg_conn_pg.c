/* SPDX-License-Identifier: MIT */
/*
 * pg_conn_pg.c - opening a worker connection (see pg_conn.h).
 *
 * A dead or black-holed server must be noticed within seconds, and a
 * forgotten statement or transaction must not pin locks forever: the
 * store and the ledger both connect through here so they cannot drift.
 */
#include "pg_conn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/error_pg.h"
#include "common/secret.h"
#include "sql_gen.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/*
 * Added to the conninfo unless it (or a PG* environment variable) sets
 * them: a black-holed server is noticed within 25 s instead of the
 * kernel's two hours (an idle connection after 10 s + 3 unanswered probes
 * 5 s apart; one waiting on unacknowledged data after tcp_user_timeout),
 * so the 30 s of FAULTS.md T13 hold with room for the poll that follows;
 * and a connect attempt gives up after 5 s.
 */
static const char *const conn_defaults[][2] = {
    {"connect_timeout", "5"},     {"keepalives", "1"},       {"keepalives_idle", "10"},
    {"keepalives_interval", "5"}, {"keepalives_count", "3"}, {"tcp_user_timeout", "25000"},
};

#define CONN_DEFAULT_COUNT (sizeof(conn_defaults) / sizeof(conn_defaults[0]))

/* The library never prints, and libpq's default notice processor does. */
static void
ignore_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

void
obx_pg_one_line(outbox_error *err)
{
    if (err == NULL) {
        return;
    }
    for (char *p = err->message; *p != '\0'; p++) {
        if (*p == '\n' || *p == '\t') {
            *p = ' ';
        }
    }
}

static int
option_is_set(const PQconninfoOption *opts, const char *keyword)
{
    for (; opts != NULL && opts->keyword != NULL; opts++) {
        if (strcmp(opts->keyword, keyword) == 0) {
            return opts->val != NULL && opts->val[0] != '\0';
        }
    }
    return 0;
}

static PGconn *
connect_with_defaults(const char *conninfo, const char *application_name,
                      const PQconninfoOption *given)
{
    const char *keys[CONN_DEFAULT_COUNT + 3];
    const char *values[CONN_DEFAULT_COUNT + 3];
    PQconninfoOption *env = PQconndefaults(); /* values from PG* environment variables */
    size_t n = 0;
    PGconn *conn;

    /* expand_dbname: the first "dbname" may be a whole URL or key=value string. */
    keys[n] = "dbname";
    values[n++] = conninfo;
    for (size_t i = 0; i < CONN_DEFAULT_COUNT; i++) {
        if (!option_is_set(given, conn_defaults[i][0]) &&
            !option_is_set(env, conn_defaults[i][0])) {
            keys[n] = conn_defaults[i][0];
            values[n++] = conn_defaults[i][1];
        }
    }
    if (application_name != NULL) {
        keys[n] = "fallback_application_name"; /* an explicit application_name wins */
        values[n++] = application_name;
    }
    keys[n] = NULL;
    values[n] = NULL;
    conn = PQconnectdbParams(keys, values, 1);
    PQconninfoFree(env);
    return conn;
}

/* Statement and idle-in-transaction limits; see session_setup.sql. */
static outbox_status
setup_session(PGconn *conn, outbox_error *err)
{
    PGresult *res = PQexecParams(conn, obx_sql_session_setup, 0, NULL, NULL, NULL, NULL, 0);
    outbox_status status = OUTBOX_OK;

    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        status = obx_fail_pg(err, conn, res, "set session timeouts");
    }
    PQclear(res);
    return status;
}

outbox_status
obx_pg_connect(const char *conninfo, const char *application_name, PGconn **out, outbox_error *err)
{
    char *parse_error = NULL;
    PQconninfoOption *given = PQconninfoParse(conninfo, &parse_error);
    PGconn *conn;
    outbox_status status;

    if (given == NULL) {
        /* libpq's message may quote the conninfo, password included. */
        PQfreemem(parse_error);
        return obx_fail(err, OUTBOX_EINVAL, "conninfo is not a libpq URL or key=value string");
    }
    conn = connect_with_defaults(conninfo, application_name, given);
    PQconninfoFree(given);
    if (conn == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "connect to postgresql: out of memory");
    }
    PQsetNoticeProcessor(conn, ignore_notice, NULL);
    if (PQstatus(conn) != CONNECTION_OK) {
        status = obx_fail_pg(err, conn, NULL, "connect to postgresql");
        obx_pg_one_line(err);
        if (err != NULL) {
            /* libpq's message may quote part of the conninfo. */
            char clean[sizeof(err->message)];

            obx_mask_echo(err->message, conninfo, clean, sizeof(clean));
            memcpy(err->message, clean, sizeof(clean));
        }
        PQfinish(conn);
        return status;
    }
    status = setup_session(conn, err);
    if (status != OUTBOX_OK) {
        PQfinish(conn);
        return status;
    }
    *out = conn;
    return OUTBOX_OK;
}

outbox_status
obx_pg_target_init(struct obx_pg_target *t, const char *conninfo, const char *application_name,
                   const char *schema, outbox_error *err)
{
    memset(t, 0, sizeof(*t));
    if (conninfo == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "conninfo is required");
    }
    if (obx_sql_quote_schema(schema, t->quoted_schema, err) != OUTBOX_OK) {
        return OUTBOX_EINVAL;
    }
    snprintf(t->schema, sizeof(t->schema), "%s", schema);
    t->conninfo = strdup(conninfo);
    t->application_name = application_name ? strdup(application_name) : NULL;
    if (t->conninfo == NULL || (application_name != NULL && t->application_name == NULL)) {
        obx_pg_target_fini(t);
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    return OUTBOX_OK;
}

void
obx_pg_target_fini(struct obx_pg_target *t)
{
    free(t->conninfo);
    free(t->application_name);
    memset(t, 0, sizeof(*t));
}

/* OUTBOX_EUNAVAILABLE, naming both versions, unless the schema has this build's migrations. */
static outbox_status
require_migrated(PGconn *conn, const struct obx_pg_target *t, outbox_error *err)
{
    int need = obx_migrations[obx_migration_count - 1].version, have = 0;
    char *sql = obx_sql_render("SELECT coalesce(max(version), 0) FROM /*schema*/schema_migrations",
                               t->quoted_schema);
    PGresult *res;
    const char *sqlstate;
    outbox_status status = OUTBOX_OK;

    if (sql == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "check the schema: out of memory");
    }
    res = PQexec(conn, sql);
    free(sql);
    sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        have = (int)strtol(PQgetvalue(res, 0, 0), NULL, 10);
    } else if (sqlstate == NULL || (strcmp(sqlstate, "42P01") != 0 &&  /* no such table */
                                    strcmp(sqlstate, "3F000") != 0)) { /* no such schema */
        status = obx_fail_pg(err, conn, res, "check the schema's migrations");
    }
    PQclear(res);
    if (status == OUTBOX_OK && have < need) {
        status = obx_fail(err, OUTBOX_EUNAVAILABLE,
                          "schema %s is at migration %d, this build needs %d: run `outboxctl "
                          "migrate` with OUTBOX_SCHEMA=%s",
                          t->schema, have, need, t->schema);
    }
    return status;
}

outbox_status
obx_pg_target_connect(const struct obx_pg_target *t, PGconn **conn, outbox_error *err)
{
    outbox_status status;

    PQfinish(*conn);
    *conn = NULL;
    status = obx_pg_connect(t->conninfo, t->application_name, conn, err);
    if (status == OUTBOX_OK && (status = require_migrated(*conn, t, err)) != OUTBOX_OK) {
        PQfinish(*conn);
        *conn = NULL;
    }
    return status;
}
