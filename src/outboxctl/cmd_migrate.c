/* SPDX-License-Identifier: MIT */
/*
 * cmd_migrate.c - `outboxctl migrate`: bring the schema up to date.
 * Safe to run from many processes at once (deploy hooks, replicas). A new
 * schema starts with per-aggregate ordering on, an upgraded one keeps its
 * setting; the line printed says which it is now.
 */
#include <jansson.h>
#include <stdio.h>

#include "ctl.h"
#include "outbox/outbox.h"
#include "query.h"
#include "sql_gen.h"

#include "common/banned.h" /* last: poisons unsafe functions */

int
obx_ctl_migrate(const struct obx_config *cfg, int argc, char **argv)
{
    outbox_error err;
    int applied = 0;
    PGconn *conn;
    int code;
    outbox_status st;
    struct obx_ctl_stmt ordering = {obx_sql_ordering_on, NULL, 0};
    json_t *row = NULL;

    (void)argv;
    if (argc != 0) {
        fprintf(stderr, "outboxctl migrate: takes no arguments\n");
        return 2;
    }
    st = outbox_schema_name_check(cfg->schema, &err);
    if (st != OUTBOX_OK) {
        fprintf(stderr, "outboxctl migrate: OUTBOX_SCHEMA: %s\n", err.message);
        return 2;
    }
    code = obx_ctl_connect(cfg, &conn);
    if (code != 0) {
        return code;
    }
    st = outbox_migrate(conn, cfg->schema, &applied, &err);
    if (st == OUTBOX_OK) {
        st = obx_ctl_query_one(conn, cfg->schema, &ordering, &row, &err);
    }
    obx_ctl_close(conn);
    if (st != OUTBOX_OK) {
        fprintf(stderr, "outboxctl migrate: %s%s%s\n", err.message,
                err.sqlstate[0] ? " sqlstate=" : "", err.sqlstate);
        return 1;
    }
    printf("schema %s is up to date (%d migration%s applied); ordering is %s\n", cfg->schema,
           applied, applied == 1 ? "" : "s",
           json_is_true(json_object_get(row, "ordering")) ? "on" : "off");
    json_decref(row);
    return 0;
}
