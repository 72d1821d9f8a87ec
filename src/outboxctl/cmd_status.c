/* SPDX-License-Identifier: MIT */
/*
 * cmd_status.c - `outboxctl status [--json]`: row counts per status and
 * the age of the oldest due row, for humans or for scripts and alerts.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"
#include "status.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static void
print_json(const char *schema, const struct obx_status *s)
{
    json_t *doc = json_pack(
        "{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:I, s:I}", "schema", schema, "pending",
        (json_int_t)s->pending, "leased", (json_int_t)s->leased, "done", (json_int_t)s->done,
        "dead", (json_int_t)s->dead, "invalid", (json_int_t)s->invalid, "backing_off",
        (json_int_t)s->backing_off, "oldest_pending_age_s", s->oldest_pending_age_s, "dead_letters",
        (json_int_t)s->dead_letters, "schema_version", (json_int_t)s->schema_version);

    json_dumpf(doc, stdout, JSON_COMPACT);
    fputc('\n', stdout);
    json_decref(doc);
}

static void
print_text(const char *schema, const struct obx_status *s)
{
    printf("schema %s (migration %lld)\n", schema, s->schema_version);
    printf("  pending   %lld (of which %lld waiting to retry)\n", s->pending, s->backing_off);
    printf("  leased    %lld\n  done      %lld\n  dead      %lld\n  invalid   %lld\n", s->leased,
           s->done, s->dead, s->invalid);
    printf("  dead letters not requeued  %lld\n", s->dead_letters);
    printf("  oldest due row             %.1f s\n", s->oldest_pending_age_s);
}

int
obx_ctl_status(const struct obx_config *cfg, int argc, char **argv)
{
    int json = argc == 1 && strcmp(argv[0], "--json") == 0;
    struct obx_status s;
    outbox_error err;
    PGconn *conn;
    int code;

    if (argc > 1 || (argc == 1 && !json)) {
        fprintf(stderr, "usage: outboxctl status [--json]\n");
        return 2;
    }
    code = obx_ctl_connect(cfg, &conn);
    if (code != 0) {
        return code;
    }
    if (obx_status_read(conn, cfg->schema, &s, &err) != OUTBOX_OK) {
        fprintf(stderr, "outboxctl status: %s\n", err.message);
        obx_ctl_close(conn);
        return err.code == OUTBOX_EINVAL ? 2 : 1;
    }
    obx_ctl_close(conn);
    if (json) {
        print_json(cfg->schema, &s);
    } else {
        print_text(cfg->schema, &s);
    }
    return 0;
}
