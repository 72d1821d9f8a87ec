/* SPDX-License-Identifier: MIT */
/*
 * store_health_pg.c - the outbox table's health as the relay reports it:
 * the oldest due and the oldest unconfirmed row, dead row versions and the
 * last vacuum, and what its claim index is read. One query, sampled on the
 * relay's health tick, so an operator sees a backlog or bloat coming.
 */
#include "store.h"

#include <stdlib.h>

#include <libpq-fe.h>

#include "common/error.h"
#include "store_int.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static long long
value_at(const PGresult *res, int column)
{
    return PQgetisnull(res, 0, column) ? 0 : strtoll(PQgetvalue(res, 0, column), NULL, 10);
}

outbox_status
obx_store_health(struct obx_store *store, struct obx_store_health *out, outbox_error *err)
{
    const char *params[] = {store->schema};
    PGresult *res;
    outbox_status status;

    obx_error_reset(err);
    status = obx_pg_session_require(&store->pg, err);
    if (status != OUTBOX_OK) {
        return status;
    }
    res = obx_pg_session_exec(&store->pg, OBX_STORE_HEALTH, params, 1);
    status = obx_pg_session_check(&store->pg, res, "sample the outbox's health", err);
    if (status == OUTBOX_OK && PQntuples(res) == 1) {
        *out = (struct obx_store_health){
            .oldest_due_s = value_at(res, 0),
            .oldest_unconfirmed_s = value_at(res, 1),
            .dead_tuples = value_at(res, 2),
            .last_vacuum_unix = value_at(res, 3),
            .claim_index_reads = value_at(res, 4),
            .claim_index_scans = value_at(res, 5),
            .claim_index_fetches = value_at(res, 6),
            .dead_letters = value_at(res, 7),
            .horizon_age_s = value_at(res, 8),
            .claim_open_s = value_at(res, 9),
            .blocked_aggregates = value_at(res, 10),
        };
    } else if (status == OUTBOX_OK) {
        status = obx_fail(err, OUTBOX_EDB, "no statistics for the outbox table");
    }
    PQclear(res);
    return status;
}
