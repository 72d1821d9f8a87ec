/* SPDX-License-Identifier: MIT */
/*
 * cmd_roles.c - `outboxctl roles [--print]`: creates the least-privilege
 * roles outbox_writer, outbox_relay, outbox_consumer and outbox_admin and
 * grants each what its job needs on this schema (sql/queries/roles.sql,
 * which says what each may do), in one transaction; --print (or --dry-run)
 * prints the SQL instead, for a DBA to review or run. Needs a role that may create
 * roles and grant on the schema (its owner or a superuser).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/sql.h"
#include "outboxctl/cli.h"
#include "outboxctl/ctl.h"
#include "outboxctl/query.h"
#include "sql_gen.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define SCHEMA_NAME_MARKER "/*schema_name*/"

/* The script for `schema`: table markers as everywhere, the schema's name for its own marker. */
static char *
render(const char *schema, outbox_error *err)
{
    char quoted[OBX_SCHEMA_QUOTED_CAP];
    size_t name_len, marker_len = strlen(SCHEMA_NAME_MARKER), count = 0;
    char *tables, *out, *w;
    const char *p, *hit;

    if (obx_sql_quote_schema(schema, quoted, err) != OUTBOX_OK) {
        return NULL;
    }
    tables = obx_sql_render(obx_sql_roles, quoted);
    if (tables == NULL) {
        obx_fail(err, OUTBOX_ENOMEM, "out of memory");
        return NULL;
    }
    name_len = strlen(quoted) - 1; /* "outbox" without the dot */
    for (p = strstr(tables, SCHEMA_NAME_MARKER); p;
         p = strstr(p + marker_len, SCHEMA_NAME_MARKER)) {
        count++;
    }
    out = malloc(strlen(tables) + count * name_len + 1);
    if (out == NULL) {
        free(tables);
        obx_fail(err, OUTBOX_ENOMEM, "out of memory");
        return NULL;
    }
    for (p = tables, w = out; (hit = strstr(p, SCHEMA_NAME_MARKER)) != NULL; p = hit + marker_len) {
        memcpy(w, p, (size_t)(hit - p));
        w += hit - p;
        memcpy(w, quoted, name_len);
        w += name_len;
    }
    memcpy(w, p, strlen(p) + 1);
    free(tables);
    return out;
}

int
obx_ctl_roles(const struct obx_config *cfg, int argc, char **argv)
{
    struct obx_ctl_args args;
    outbox_error err = {0};
    PGconn *conn = NULL;
    char *sql = NULL;
    int code = obx_ctl_args_parse("roles", OBX_CTL_OPT_PRINT | OBX_CTL_OPT_DRY_RUN, 0, 0, argc,
                                  argv, &args);

    if (code == 0 && (sql = render(cfg->schema, &err)) == NULL) {
        code = obx_ctl_fail("roles", &err);
    }
    if (code == 0 && (args.print || args.dry_run)) {
        fputs(sql, stdout);
    } else if (code == 0 && (code = obx_ctl_connect(cfg, &conn)) == 0) {
        if (obx_ctl_exec(conn, "BEGIN", &err) != OUTBOX_OK ||
            obx_ctl_exec(conn, sql, &err) != OUTBOX_OK ||
            obx_ctl_exec(conn, "COMMIT", &err) != OUTBOX_OK) {
            obx_ctl_exec(conn, "ROLLBACK", NULL);
            code = obx_ctl_fail("roles", &err);
        } else {
            printf("roles outbox_writer, outbox_relay, outbox_consumer and outbox_admin hold "
                   "their grants on schema %s (no passwords set: ALTER ROLE ... PASSWORD, or "
                   "GRANT a role to your own login roles)\n",
                   cfg->schema);
        }
    }
    obx_ctl_close(conn);
    free(sql);
    obx_ctl_args_fini(&args);
    return code;
}
