/* SPDX-License-Identifier: MIT */
/*
 * cmd_ordering.c - `outboxctl ordering on|off|status [--json]`: the
 * schema's per-aggregate ordering (migration 0014, docs/ordering.md).
 *
 * The switch lives in the database (the events_seq trigger, enabled or
 * not), so writers, relays and consumers cannot disagree about it; this
 * verb only flips it through outbox.set_ordering(), which runs as the
 * schema's owner, and reads it back. Switching waits up to 3 s for the
 * writers in flight (a clean cut between numbered and unnumbered rows);
 * behind a longer transaction it fails with exit 1 and can be run again.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ctl.h"
#include "query.h"
#include "sql_gen.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static int
ordering_status(PGconn *conn, const struct obx_config *cfg, int json)
{
    struct obx_ctl_stmt stmt = {obx_sql_ordering_status, NULL, 0};
    outbox_error err = {0};
    json_t *row = NULL, *line;

    if (obx_ctl_query_one(conn, cfg->schema, &stmt, &row, &err) != OUTBOX_OK) {
        return obx_ctl_fail("ordering status", &err);
    }
    if (json) {
        line = json_pack("{s:s}", "schema", cfg->schema);
        json_object_update(line, row);
        json_dumpf(line, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(line);
    } else {
        printf("schema %s: ordering is %s\n", cfg->schema,
               json_is_true(json_object_get(row, "ordering")) ? "on" : "off");
        printf("  aggregates numbered  %lld (highest aggregate_seq %lld)\n",
               (long long)json_integer_value(json_object_get(row, "aggregates")),
               (long long)json_integer_value(json_object_get(row, "highest_seq")));
        printf("  waiting rows         %lld ordered, %lld unordered\n",
               (long long)json_integer_value(json_object_get(row, "waiting_ordered")),
               (long long)json_integer_value(json_object_get(row, "waiting_unordered")));
    }
    json_decref(row);
    return 0;
}

static int
ordering_set(PGconn *conn, const struct obx_config *cfg, int on, int json)
{
    const char *params[] = {on ? "true" : "false"};
    struct obx_ctl_stmt stmt = {obx_sql_ordering_set, params, 1};
    const char *verb = on ? "ordering on" : "ordering off";
    outbox_error err = {0};
    json_t *row = NULL;
    int was_on;

    if (obx_ctl_query_one(conn, cfg->schema, &stmt, &row, &err) != OUTBOX_OK) {
        if (strcmp(err.sqlstate, "55P03") == 0) {
            fprintf(stderr,
                    "outboxctl %s: a transaction that wrote to %s.events is still open after "
                    "3 s, so the switch gave up (writers wait while it waits); run it again, "
                    "or end that transaction first (sqlstate=55P03)\n",
                    verb, cfg->schema);
            return 1;
        }
        if (strcmp(err.sqlstate, "42501") == 0) {
            fprintf(stderr,
                    "outboxctl %s: %s (sqlstate=42501); run it as the schema's owner or as "
                    "outbox_admin (outboxctl roles)\n",
                    verb, err.message);
            return 1;
        }
        return obx_ctl_fail(verb, &err);
    }
    was_on = json_is_true(json_object_get(row, "was_on"));
    json_decref(row);
    if (json) {
        printf("{\"schema\":\"%s\",\"ordering\":%s,\"was\":%s}\n", cfg->schema,
               on ? "true" : "false", was_on ? "true" : "false");
    } else if (was_on == on) {
        printf("schema %s: ordering was already %s\n", cfg->schema, on ? "on" : "off");
    } else if (on) {
        printf("schema %s: ordering is on: every event committed from now on gets its "
               "aggregate's next aggregate_seq; rows already waiting stay unordered\n",
               cfg->schema);
    } else {
        printf("schema %s: ordering is off: events committed from now on get no "
               "aggregate_seq; rows already numbered keep theirs\n",
               cfg->schema);
    }
    return 0;
}

int
obx_ctl_ordering(const struct obx_config *cfg, int argc, char **argv)
{
    struct obx_ctl_args args;
    PGconn *conn = NULL;
    const char *sub;
    int code = obx_ctl_args_parse("ordering", OBX_CTL_OPT_JSON, 1, 1, argc, argv, &args);

    sub = args.positional[0];
    if (code == 0 && strcmp(sub, "on") != 0 && strcmp(sub, "off") != 0 &&
        strcmp(sub, "status") != 0) {
        fprintf(stderr, "outboxctl ordering: \"%.40s\" is not on, off or status\n", sub);
        code = 2;
    }
    if (code == 0) {
        code = obx_ctl_connect(cfg, &conn);
    }
    if (code == 0) {
        code = strcmp(sub, "status") == 0
                   ? ordering_status(conn, cfg, args.json)
                   : ordering_set(conn, cfg, strcmp(sub, "on") == 0, args.json);
    }
    obx_ctl_close(conn);
    obx_ctl_args_fini(&args);
    return code;
}
