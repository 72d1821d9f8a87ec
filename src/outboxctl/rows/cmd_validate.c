/* SPDX-License-Identifier: MIT */
/*
 * cmd_validate.c - `outboxctl validate [filters] [--json]`: the pending
 * rows the relay would quarantine today, checked by the relay's own code
 * (relay_check.h). A lower size limit, a new prefix, or rows a foreign
 * writer slipped past the table's rules show here before the relay turns
 * them invalid. Exit 1 when any. The rows already quarantined are counted
 * and left to `outboxctl quarantine`.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxctl/cli.h"
#include "outboxctl/ctl.h"
#include "outboxctl/out.h"
#include "outboxctl/query.h"
#include "relay_check.h"
#include "sql_gen.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { PAGE_ROWS = 500 };

static const char *const invalid_keys[] = {"id", "event_type", "created_at", "reason", NULL};

/* Checks one page and prints its invalid rows. Returns rows read, -1 on failure. */
static long long
check_page(const struct obx_config *cfg, PGconn *conn, const struct obx_ctl_stmt *stmt,
           size_t max_body, int json, long long *invalid, char cursor[40], outbox_error *err)
{
    json_t *rows = NULL, *row;
    long long count;
    size_t i;

    if (obx_ctl_relay_check(conn, cfg, stmt, max_body, &rows, err) != OUTBOX_OK) {
        return -1;
    }
    json_array_foreach(rows, i, row)
    {
        if (json_object_get(row, "reason") != NULL) {
            obx_ctl_emit(json, "invalid", row, invalid_keys);
            (*invalid)++;
        }
        snprintf(cursor, 40, "%s", obx_ctl_str(row, "id"));
    }
    count = (long long)json_array_size(rows);
    json_decref(rows);
    return count;
}

/* Rows the relay has quarantined already (any filter aside). */
static outbox_status
count_quarantined(const struct obx_config *cfg, PGconn *conn, long long *out, outbox_error *err)
{
    struct obx_ctl_stmt stmt = {obx_sql_quarantine_count, NULL, 0};
    json_t *row = NULL;
    outbox_status st = obx_ctl_query_one(conn, cfg->schema, &stmt, &row, err);

    *out = st == OUTBOX_OK ? obx_ctl_int(row, "quarantined") : 0;
    json_decref(row);
    return st;
}

int
obx_ctl_validate(const struct obx_config *cfg, int argc, char **argv)
{
    struct obx_ctl_args args;
    const char *params[OBX_CTL_FILTER_COUNT + 2];
    struct obx_ctl_stmt stmt = {obx_sql_validate_rows, params, OBX_CTL_FILTER_COUNT + 2};
    char cursor[40] = "", page[24];
    long long checked = 0, invalid = 0, got = 0, left, quarantined = 0;
    outbox_error err = {0};
    PGconn *conn = NULL;
    size_t max_body;
    json_t *s;
    int code = obx_ctl_args_parse("validate",
                                  OBX_CTL_OPT_JSON | OBX_CTL_OPT_ROUTE | OBX_CTL_OPT_TIME |
                                      OBX_CTL_OPT_IDS | OBX_CTL_OPT_LIMIT,
                                  0, 0, argc, argv, &args);

    if (code == 0) {
        code = obx_ctl_connect(cfg, &conn);
    }
    if (code == 0) {
        max_body = obx_ctl_body_limit(cfg, "validate");
        obx_ctl_filter_params(&args, params);
        left = args.limit[0] ? strtoll(args.limit, NULL, 10) : -1;
        do {
            long long want = left < 0 || left > PAGE_ROWS ? PAGE_ROWS : left;

            snprintf(page, sizeof(page), "%lld", want);
            params[OBX_CTL_FILTER_COUNT] = cursor[0] ? cursor : NULL;
            params[OBX_CTL_FILTER_COUNT + 1] = page;
            got = check_page(cfg, conn, &stmt, max_body, args.json, &invalid, cursor, &err);
            checked += got > 0 ? got : 0;
            left -= left < 0 || got < 0 ? 0 : got;
        } while (got == PAGE_ROWS && left != 0);
        if (got >= 0 && count_quarantined(cfg, conn, &quarantined, &err) != OUTBOX_OK) {
            got = -1;
        }
        if (got < 0) {
            code = obx_ctl_fail("validate", &err);
        }
    }
    if (code == 0) {
        s = json_pack("{s:s, s:I, s:I, s:I, s:I}", "action", "validate", "checked",
                      (json_int_t)checked, "invalid", (json_int_t)invalid, "max_body_bytes",
                      (json_int_t)max_body, "quarantined", (json_int_t)quarantined);
        if (args.json) {
            obx_ctl_emit(1, "summary", s, NULL);
        } else {
            printf("%lld pending row%s checked, %lld the relay would quarantine (body limit %zu "
                   "bytes)\n",
                   checked, checked == 1 ? "" : "s", invalid, max_body);
        }
        if (!args.json && quarantined > 0) {
            printf("%lld row%s quarantined already: outboxctl quarantine list\n", quarantined,
                   quarantined == 1 ? " is" : "s are");
        }
        json_decref(s);
        code = invalid > 0 ? 1 : 0;
    }
    obx_ctl_close(conn);
    obx_ctl_args_fini(&args);
    return code;
}
