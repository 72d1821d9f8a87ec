/* SPDX-License-Identifier: MIT */
/*
 * store_plan_pg.c - a statement's plan as the store's own session would run
 * it (see store.h): the lease's, the window claim's and its takeover's, the
 * health sample's and the prune's. The
 * plan-shape tests read them, and so can an operator chasing a slow lease.
 */
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "common/buf.h"
#include "common/error.h"
#include "common/error_pg.h"
#include "store_int.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* EXPLAIN EXECUTE of prepared statement `which` with `args` (literals, in parentheses). */
static outbox_status
explain(struct obx_store *store, size_t which, int nparams, const char *args, int analyze,
        char **json, outbox_error *err)
{
    char name[OBX_PG_STATEMENT_NAME_CAP];
    struct obx_buf sql;
    PGresult *res;
    outbox_status status = obx_pg_session_prepare(&store->pg, which, nparams, err);

    if (status != OUTBOX_OK) {
        return status;
    }
    obx_buf_init(&sql);
    /* EXPLAIN EXECUTE: the plan the relay's prepared statement runs, not a fresh one. */
    obx_buf_append_str(&sql, analyze ? "EXPLAIN (FORMAT JSON, ANALYZE, BUFFERS) EXECUTE "
                                     : "EXPLAIN (FORMAT JSON) EXECUTE ");
    obx_buf_append_str(&sql, obx_pg_session_statement_name(which, name));
    obx_buf_append_str(&sql, args);
    if (obx_buf_failed(&sql)) {
        obx_buf_fini(&sql);
        return obx_fail(err, OUTBOX_ENOMEM, "plan: out of memory");
    }
    res = PQexec(store->pg.conn, sql.data);
    obx_buf_fini(&sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        status = obx_fail_pg(err, store->pg.conn, res, "explain a store statement");
    } else if ((*json = strdup(PQgetvalue(res, 0, 0))) == NULL) {
        status = obx_fail(err, OUTBOX_ENOMEM, "plan: out of memory");
    }
    PQclear(res);
    return status;
}

/* Runs prepared statement `which` (no parameters) for its effect inside the plan's transaction. */
static outbox_status
run_first(struct obx_store *store, size_t which, outbox_error *err)
{
    return obx_pg_session_run(&store->pg, which, NULL, 0, "run the plan's first statement", err);
}

/*
 * The plan, inside a transaction that is rolled back when `analyze` or
 * when statement `first` (OBX_STORE_SQL_COUNT: none) must run before it,
 * as the window claim's cursor lock does.
 */
static outbox_status
plan(struct obx_store *store, size_t first, size_t which, int nparams, const char *args,
     int analyze, char **json, outbox_error *err)
{
    outbox_status status = obx_pg_session_require(&store->pg, err), undone;
    int wrapped = analyze || first != OBX_STORE_SQL_COUNT;

    if (status != OUTBOX_OK || !wrapped) {
        return status != OUTBOX_OK ? status : explain(store, which, nparams, args, 0, json, err);
    }
    status = obx_pg_exec(store->pg.conn, "BEGIN", "begin the plan", err);
    if (status != OUTBOX_OK) {
        return status;
    }
    if (first != OBX_STORE_SQL_COUNT) {
        status = run_first(store, first, err);
    }
    if (status == OUTBOX_OK) {
        status = explain(store, which, nparams, args, analyze, json, err);
    }
    undone = obx_pg_exec(store->pg.conn, "ROLLBACK", "roll back the plan",
                         status == OUTBOX_OK ? err : &(outbox_error){0});
    if (status == OUTBOX_OK && undone != OUTBOX_OK) {
        free(*json);
        *json = NULL;
        status = undone;
    }
    return status;
}

outbox_status
obx_store_lease_plan(struct obx_store *store, int limit, int analyze, char **json,
                     outbox_error *err)
{
    char args[48];

    obx_error_reset(err);
    *json = NULL;
    if (limit < 1) {
        return obx_fail(err, OUTBOX_EINVAL, "lease plan: limit %d must be >= 1", limit);
    }
    /* EXECUTE takes literals only: limit, lease seconds, max lease expiries. */
    snprintf(args, sizeof(args), "(%d, 60, 5)", limit);
    return plan(store, OBX_STORE_SQL_COUNT, OBX_STORE_LEASE, 3, args, analyze, json, err);
}

outbox_status
obx_store_health_plan(struct obx_store *store, int analyze, char **json, outbox_error *err)
{
    struct obx_buf args;
    outbox_status status;

    obx_error_reset(err);
    *json = NULL;
    /* The schema's name passed outbox_schema_name_check() when the store opened (its
     * statements are rendered with it): [a-z_][a-z0-9_]*, nothing to escape in a literal. */
    obx_buf_init(&args);
    obx_buf_appendf(&args, "('%s')", store->schema);
    status = obx_buf_failed(&args) ? obx_fail(err, OUTBOX_ENOMEM, "health plan: out of memory")
                                   : plan(store, OBX_STORE_SQL_COUNT, OBX_STORE_HEALTH, 1,
                                          args.data, analyze, json, err);
    obx_buf_fini(&args);
    return status;
}

outbox_status
obx_store_prune_plan(struct obx_store *store, int retention_seconds, int limit, int analyze,
                     char **json, outbox_error *err)
{
    char args[64];

    obx_error_reset(err);
    *json = NULL;
    if (retention_seconds < 0 || limit < 1) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "prune plan: retention %d must be >= 0 and limit %d >= 1",
                        retention_seconds, limit);
    }
    /* A pass's first batch: from the oldest key. */
    snprintf(args, sizeof(args), "(%d, %d, NULL)", retention_seconds, limit);
    return plan(store, OBX_STORE_SQL_COUNT, OBX_STORE_PRUNE, 3, args, analyze, json, err);
}

outbox_status
obx_store_claim_plan(struct obx_store *store, int limit, int analyze, char **json,
                     outbox_error *err)
{
    char args[96];

    obx_error_reset(err);
    *json = NULL;
    if (limit < 1) {
        return obx_fail(err, OUTBOX_EINVAL, "claim plan: limit %d must be >= 1", limit);
    }
    /* Limit, claim seconds, holder, token; under the cursor lock, as the claim runs. */
    snprintf(args, sizeof(args), "(%d, 60, 'plan', '00000000-0000-7000-8000-000000000000')", limit);
    return plan(store, OBX_STORE_CLAIM_CURSOR, OBX_STORE_CLAIM_WINDOW, 4, args, analyze, json, err);
}

outbox_status
obx_store_takeover_plan(struct obx_store *store, int analyze, char **json, outbox_error *err)
{
    obx_error_reset(err);
    *json = NULL;
    /* No parameters; under the cursor lock, as the claim runs it. */
    return plan(store, OBX_STORE_CLAIM_CURSOR, OBX_STORE_CLAIM_TAKEOVER, 0, "", analyze, json, err);
}
