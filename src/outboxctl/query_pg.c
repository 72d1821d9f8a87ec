/* SPDX-License-Identifier: MIT */
/*
 * query_pg.c - runs outboxctl's statements and turns their rows into JSON
 * (see query.h). The one place of outboxctl's row verbs that calls libpq.
 */
#include "query.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/error_pg.h"
#include "common/sql.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* pg_type oids, fixed catalog values. */
enum {
    OID_BOOL = 16,
    OID_INT8 = 20,
    OID_INT2 = 21,
    OID_INT4 = 23,
    OID_TEXT = 25,
    OID_OID = 26,
    OID_JSON = 114,
    OID_FLOAT4 = 700,
    OID_FLOAT8 = 701,
    OID_TIMESTAMPTZ = 1184,
    OID_NUMERIC = 1700,
    OID_JSONB = 3802,
};

enum { MAX_PARAMS = 32 };

/* "2026-11-29 09:41:56.123+00" -> "2026-11-29T09:41:56.123+00:00". */
static json_t *
timestamp_value(const char *v)
{
    char out[64];
    size_t len = strlen(v);

    if (len + 4 > sizeof(out)) {
        return json_string(v);
    }
    memcpy(out, v, len + 1);
    if (len > 10 && out[10] == ' ') {
        out[10] = 'T';
    }
    if (len > 3 && (out[len - 3] == '+' || out[len - 3] == '-')) {
        memcpy(out + len, ":00", 4); /* a whole-hour zone: RFC 3339 wants its minutes */
    }
    return json_string(out);
}

static json_t *
value_of(const PGresult *res, int row, int col)
{
    const char *v = PQgetvalue(res, row, col);

    if (PQgetisnull(res, row, col)) {
        return json_null();
    }
    switch (PQftype(res, col)) {
    case OID_BOOL:
        return json_boolean(v[0] == 't');
    case OID_INT2:
    case OID_INT4:
    case OID_INT8:
    case OID_OID:
        return json_integer((json_int_t)strtoll(v, NULL, 10));
    case OID_FLOAT4:
    case OID_FLOAT8:
    case OID_NUMERIC:
        return json_real(strtod(v, NULL));
    case OID_JSON:
    case OID_JSONB: {
        json_t *doc = json_loads(v, JSON_DECODE_ANY, NULL);

        return doc != NULL ? doc : json_string(v);
    }
    case OID_TIMESTAMPTZ:
        return timestamp_value(v);
    default:
        return json_stringn(v, (size_t)PQgetlength(res, row, col));
    }
}

static json_t *
rows_of(const PGresult *res)
{
    json_t *rows = json_array();

    for (int r = 0; rows != NULL && r < PQntuples(res); r++) {
        json_t *obj = json_object();

        for (int c = 0; obj != NULL && c < PQnfields(res); c++) {
            json_object_set_new(obj, PQfname(res, c), value_of(res, r, c));
        }
        json_array_append_new(rows, obj);
    }
    return rows;
}

/* Runs the statement; a result holding rows or a command's success, or NULL and `err`. */
static PGresult *
run(PGconn *conn, const char *schema, const struct obx_ctl_stmt *stmt, outbox_error *err)
{
    char quoted[OBX_SCHEMA_QUOTED_CAP];
    Oid types[MAX_PARAMS];
    PGresult *res;
    char *sql;
    ExecStatusType st;

    if (stmt->count > MAX_PARAMS) {
        obx_fail(err, OUTBOX_EINVAL, "statement with %d parameters (at most %d)", stmt->count,
                 MAX_PARAMS);
        return NULL;
    }
    if (obx_sql_quote_schema(schema, quoted, err) != OUTBOX_OK) {
        return NULL;
    }
    sql = obx_sql_render(stmt->tmpl, quoted);
    if (sql == NULL) {
        obx_fail(err, OUTBOX_ENOMEM, "out of memory");
        return NULL;
    }
    for (int i = 0; i < stmt->count; i++) {
        types[i] = OID_TEXT;
    }
    res = PQexecParams(conn, sql, stmt->count, types, stmt->params, NULL, NULL, 0);
    free(sql);
    st = PQresultStatus(res);
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
        obx_fail_pg(err, conn, res, "query");
        PQclear(res);
        return NULL;
    }
    return res;
}

outbox_status
obx_ctl_query(PGconn *conn, const char *schema, const struct obx_ctl_stmt *stmt, json_t **rows,
              outbox_error *err)
{
    PGresult *res = run(conn, schema, stmt, err);
    json_t *out;

    if (res == NULL) {
        return err != NULL ? err->code : OUTBOX_EDB;
    }
    out = rows_of(res);
    PQclear(res);
    if (out == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    *rows = out;
    return OUTBOX_OK;
}

outbox_status
obx_ctl_query_one(PGconn *conn, const char *schema, const struct obx_ctl_stmt *stmt, json_t **row,
                  outbox_error *err)
{
    json_t *rows = NULL;
    outbox_status st = obx_ctl_query(conn, schema, stmt, &rows, err);

    if (st == OUTBOX_OK) {
        *row = json_incref(json_array_get(rows, 0));
        json_decref(rows);
    }
    return st;
}

outbox_status
obx_ctl_query_lease(PGconn *conn, const char *schema, const struct obx_ctl_stmt *stmt,
                    struct obx_lease *out, json_t **rows, outbox_error *err)
{
    PGresult *res = run(conn, schema, stmt, err);
    json_t *all;

    memset(out, 0, sizeof(*out));
    if (res == NULL) {
        return err != NULL ? err->code : OUTBOX_EDB;
    }
    if (PQnfields(res) < 2) {
        PQclear(res);
        return obx_fail(err, OUTBOX_EINVAL, "a lease query returns the id and the envelope first");
    }
    all = rows_of(res);
    if (all == NULL) {
        PQclear(res);
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    out->rows = res; /* read by store_pg.c's obx_lease_id() and obx_lease_envelope() */
    out->count = (size_t)PQntuples(res);
    *rows = all;
    return OUTBOX_OK;
}

outbox_status
obx_ctl_exec(PGconn *conn, const char *sql, outbox_error *err)
{
    return obx_pg_exec(conn, sql, sql, err);
}
