/* SPDX-License-Identifier: MIT */
/*
 * cmd_validate.c - `outboxctl validate [filters] [--json]`: the pending
 * rows the relay would quarantine today, checked by the relay's own code
 * (obx_relay_batch_prepare: the envelope read again, its id against the
 * row's, the subject built with this OUTBOX_SUBJECT_PREFIX, the body
 * against the server's max_payload less the header budget). A lower size
 * limit, a new prefix, or rows a foreign writer slipped past the table's
 * rules show here before the relay turns them invalid. Exit 1 when any.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus/bus.h"
#include "outbox/worker.h"
#include "outboxctl/cli.h"
#include "outboxctl/ctl.h"
#include "outboxctl/out.h"
#include "outboxctl/query.h"
#include "outboxctl/stream/js_admin.h"
#include "relay/relay_batch.h"
#include "sql_gen.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { PAGE_ROWS = 500 };

/* NATS's default max_payload, when the server cannot be asked. */
#define DEFAULT_MAX_PAYLOAD ((size_t)1024 * 1024)
/* What the DB feed reads (feed_db.c): no broker, so no max_payload. */
#define DB_FEED_MAX_BYTES ((size_t)64 * 1024 * 1024)

static const char *const invalid_keys[] = {"id", "event_type", "created_at", "reason", NULL};

/* The largest body the relay (or the DB feed) takes today. */
static size_t
body_limit(const struct obx_config *cfg)
{
    struct obx_ctl_js *js = NULL;
    outbox_error err = {0};
    size_t max = 0;

    if (cfg->bus == OUTBOX_BUS_DB) {
        return DB_FEED_MAX_BYTES;
    }
    if (obx_ctl_js_open(cfg, &js, &err) == OUTBOX_OK) {
        max = obx_ctl_js_max_payload(js);
    }
    obx_ctl_js_close(js);
    if (max == 0) {
        fprintf(stderr,
                "outboxctl validate: %s: sizes are checked against NATS's default "
                "max_payload of 1 MiB\n",
                err.message[0] ? err.message : "the server's max_payload is unknown");
        max = DEFAULT_MAX_PAYLOAD;
    }
    return obx_bus_body_limit(max);
}

/* Checks one page; appends nothing, prints the invalid rows. Returns rows read, -1 on failure. */
static long long
check_page(const struct obx_config *cfg, PGconn *conn, const struct obx_ctl_stmt *stmt,
           size_t max_body, int json, long long *invalid, char cursor[40], outbox_error *err)
{
    struct obx_relay_batch b;
    struct obx_lease lease;
    json_t *rows = NULL;
    long long count;

    if (obx_ctl_query_lease(conn, cfg->schema, stmt, &lease, &rows, err) != OUTBOX_OK) {
        return -1;
    }
    if (obx_relay_batch_prepare(&b, &lease, cfg->subject_prefix, max_body, err) != OUTBOX_OK) {
        obx_lease_fini(&lease);
        json_decref(rows);
        return -1;
    }
    for (size_t i = 0; i < b.count; i++) {
        json_t *row = json_array_get(rows, i);

        if (b.rows[i].outcome == OBX_ROW_INVALID) {
            json_object_set_new(row, "reason", json_string(b.rows[i].reason));
            json_object_del(row, "envelope");
            obx_ctl_emit(json, "invalid", row, invalid_keys);
            (*invalid)++;
        }
        snprintf(cursor, 40, "%s", obx_ctl_str(row, "id"));
    }
    count = (long long)b.count;
    obx_relay_batch_fini(&b);
    obx_lease_fini(&lease);
    json_decref(rows);
    return count;
}

int
obx_ctl_validate(const struct obx_config *cfg, int argc, char **argv)
{
    struct obx_ctl_args args;
    const char *params[OBX_CTL_FILTER_COUNT + 2];
    struct obx_ctl_stmt stmt = {obx_sql_validate_rows, params, OBX_CTL_FILTER_COUNT + 2};
    char cursor[40] = "", page[24];
    long long checked = 0, invalid = 0, got = 0, left;
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
        max_body = body_limit(cfg);
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
        if (got < 0) {
            code = obx_ctl_fail("validate", &err);
        }
    }
    if (code == 0) {
        s = json_pack("{s:s, s:I, s:I, s:I}", "action", "validate", "checked", (json_int_t)checked,
                      "invalid", (json_int_t)invalid, "max_body_bytes", (json_int_t)max_body);
        if (args.json) {
            obx_ctl_emit(1, "summary", s, NULL);
        } else {
            printf("%lld pending row%s checked, %lld the relay would quarantine (body limit %zu "
                   "bytes)\n",
                   checked, checked == 1 ? "" : "s", invalid, max_body);
        }
        json_decref(s);
        code = invalid > 0 ? 1 : 0;
    }
    obx_ctl_close(conn);
    obx_ctl_args_fini(&args);
    return code;
}
