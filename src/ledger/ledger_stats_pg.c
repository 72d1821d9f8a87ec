/* SPDX-License-Identifier: MIT */
/*
 * ledger_stats_pg.c - what the ledger tells the consumer about its
 * handlers as a whole: for the gauges, each one's dead letters still
 * waiting for an operator and its parked events (sampled on the
 * maintenance tick, never on the claim path); for the sweep, which ones
 * have parked events to take at all; and the same gauges for the handlers
 * the ledger knows that no daemon runs (an SQL API's).
 */
#include "ledger.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "common/buf.h"
#include "common/error.h"
#include "ledger_int.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* The text[] literal of handler names: they are [A-Za-z0-9_.-], so it needs no quoting. */
static int
names_array(const char *const *names, size_t count, struct obx_buf *list)
{
    obx_buf_init(list);
    obx_buf_append_str(list, "{");
    for (size_t i = 0; i < count; i++) {
        obx_buf_appendf(list, "%s%s", names[i], i + 1 < count ? "," : "");
    }
    obx_buf_append_str(list, "}");
    if (obx_buf_failed(list)) {
        obx_buf_fini(list);
        return -1;
    }
    return 0;
}

/* A gauges row of ledger_handler_gauges.sql or ledger_other_handler_gauges.sql: name, dead
 * letters, parked events, oldest parked age. */
static struct obx_handler_gauges
gauges_of_row(const PGresult *res, int r)
{
    return (struct obx_handler_gauges){.dead_letters = strtoll(PQgetvalue(res, r, 1), NULL, 10),
                                       .parked = strtoll(PQgetvalue(res, r, 2), NULL, 10),
                                       .oldest_parked_seconds =
                                           strtoll(PQgetvalue(res, r, 3), NULL, 10)};
}

outbox_status
obx_ledger_handler_gauges(struct obx_ledger *ledger, const char *const *names, size_t count,
                          struct obx_handler_gauges *out, outbox_error *err)
{
    struct obx_buf list;
    const char *params[1];
    PGresult *res;
    outbox_status status;

    obx_error_reset(err);
    memset(out, 0, count * sizeof(*out));
    status = obx_pg_session_require(&ledger->pg, err);
    if (status != OUTBOX_OK || count == 0) {
        return status;
    }
    if (names_array(names, count, &list) != 0) {
        return obx_fail(err, OUTBOX_ENOMEM, "handler gauges: out of memory");
    }
    params[0] = list.data;
    res = obx_pg_session_exec(&ledger->pg, OBX_LEDGER_HANDLER_GAUGES, params, 1);
    status = obx_pg_session_check(&ledger->pg, res, "read handler gauges", err);
    for (int r = 0; status == OUTBOX_OK && r < PQntuples(res); r++) {
        for (size_t i = 0; i < count; i++) {
            if (strcmp(PQgetvalue(res, r, 0), names[i]) == 0) {
                out[i] = gauges_of_row(res, r);
            }
        }
    }
    PQclear(res);
    obx_buf_fini(&list);
    return status;
}

outbox_status
obx_ledger_other_handler_gauges(struct obx_ledger *ledger, const char *const *names, size_t count,
                                struct obx_other_handler_gauges *out, size_t *n, outbox_error *err)
{
    struct obx_buf list;
    const char *params[1];
    PGresult *res;
    outbox_status status;

    obx_error_reset(err);
    *n = 0;
    status = obx_pg_session_require(&ledger->pg, err);
    if (status != OUTBOX_OK) {
        return status;
    }
    if (names_array(names, count, &list) != 0) {
        return obx_fail(err, OUTBOX_ENOMEM, "handler gauges: out of memory");
    }
    params[0] = list.data;
    res = obx_pg_session_exec(&ledger->pg, OBX_LEDGER_OTHER_HANDLER_GAUGES, params, 1);
    status = obx_pg_session_check(&ledger->pg, res, "read other handlers' gauges", err);
    for (int r = 0; status == OUTBOX_OK && r < PQntuples(res) && *n < OBX_OTHER_HANDLERS_MAX; r++) {
        struct obx_other_handler_gauges *o = &out[(*n)++];

        snprintf(o->name, sizeof(o->name), "%s", PQgetvalue(res, r, 0));
        o->gauges = gauges_of_row(res, r);
    }
    PQclear(res);
    obx_buf_fini(&list);
    return status;
}

outbox_status
obx_ledger_parked_waiting(struct obx_ledger *ledger, const char *const *names, size_t count,
                          int *waiting, outbox_error *err)
{
    struct obx_buf list;
    const char *params[1];
    PGresult *res;
    outbox_status status;

    obx_error_reset(err);
    memset(waiting, 0, count * sizeof(*waiting));
    status = obx_pg_session_require(&ledger->pg, err);
    if (status != OUTBOX_OK || count == 0) {
        return status;
    }
    if (names_array(names, count, &list) != 0) {
        return obx_fail(err, OUTBOX_ENOMEM, "parked events waiting: out of memory");
    }
    params[0] = list.data;
    res = obx_pg_session_exec(&ledger->pg, OBX_LEDGER_PARKED_WAITING, params, 1);
    status = obx_pg_session_check(&ledger->pg, res, "look for parked events", err);
    for (int r = 0; status == OUTBOX_OK && r < PQntuples(res); r++) {
        for (size_t i = 0; i < count; i++) {
            waiting[i] |= strcmp(PQgetvalue(res, r, 0), names[i]) == 0;
        }
    }
    PQclear(res);
    obx_buf_fini(&list);
    return status;
}
