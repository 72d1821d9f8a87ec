/* SPDX-License-Identifier: MIT */
/*
 * cmd_audit.c - `outboxctl audit [--since TIME] [--repair] [--json]`: are
 * the retained rows in the stream? Every done row published within the
 * stream's max_age (and since TIME) must be there under its own
 * Nats-Msg-Id. This is the answer to brokers that ack and then lose writes
 * (nats-server 2.9.10 cannot fsync every write) and to a stream deleted or
 * wiped: the stream is read once, in order, into a map of message ids,
 * and each row is looked up in it.
 *
 * A row found at another sequence than its stream_seq (a replay, a
 * recreated stream) is present ("moved"); a row whose sequence the stream
 * dropped by its own size limits (max_bytes, max_msgs) after storing it is
 * "expired", not missing. --repair publishes the missing ones again through
 * the relay's path and records every sequence (--dry-run with it: only the
 * report). Exit 1 while rows are missing (after a full repair, 0).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "outboxctl/cli.h"
#include "outboxctl/ctl.h"
#include "outboxctl/out.h"
#include "outboxctl/query.h"
#include "outboxctl/stream/js_admin.h"
#include "republish.h"
#include "sql_gen.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { PAGE_ROWS = 1000, REPAIR_CHUNK = 500 };

static const char *const missing_keys[] = {"id", "stream_seq", "published_at", NULL};
static const char *const repaired_keys[] = {"id", "outcome", "stream_seq", "reason", NULL};

struct audit {
    const struct obx_config *cfg;
    struct obx_ctl_args *args;
    PGconn *conn;
    struct obx_ctl_stream stream;
    json_t *seen;    /* Nats-Msg-Id -> sequence, from the stream */
    json_t *missing; /* ids */
    json_t *moved;   /* {id, outcome: duplicate, stream_seq}: sequences to record */
    long long rows, present, expired, repaired;
    outbox_error err;
};

static int
remember(void *ctx, const struct obx_ctl_js_seen *m)
{
    struct audit *a = ctx;

    if (m->msg_id[0] != '\0') {
        json_object_set_new(a->seen, m->msg_id, json_integer((json_int_t)m->seq));
    }
    return 0;
}

/* Dropped by the stream's own size limits after it stored the row: not a loss. */
static int
expired_by_limits(const struct audit *a, json_t *row)
{
    const struct obx_ctl_stream *s = &a->stream;
    json_t *seq = json_object_get(row, "stream_seq");

    return s->exists && (s->max_bytes > 0 || s->max_msgs > 0) && json_is_integer(seq) &&
           (unsigned long long)json_integer_value(seq) < s->first_seq &&
           obx_ctl_int(row, "published_unix_ms") >= s->created_unix_ms;
}

static void
check_row(struct audit *a, json_t *row)
{
    json_t *at = json_object_get(a->seen, obx_ctl_str(row, "id"));
    json_t *seq = json_object_get(row, "stream_seq");

    a->rows++;
    if (at != NULL) {
        a->present++;
        if (!json_is_integer(seq) || json_integer_value(seq) != json_integer_value(at)) {
            json_array_append_new(a->moved,
                                  json_pack("{s:O, s:s, s:O}", "id", json_object_get(row, "id"),
                                            "outcome", "duplicate", "stream_seq", at));
        }
    } else if (expired_by_limits(a, row)) {
        a->expired++;
    } else {
        json_array_append(a->missing, json_object_get(row, "id"));
        obx_ctl_emit(a->args->json, "missing", row, missing_keys);
    }
}

/* Every retained row within max_age, page by page. */
static outbox_status
check_rows(struct audit *a)
{
    char max_age[24], page[24], cursor[40] = "";
    const char *params[] = {a->args->since, max_age, NULL, page};
    struct obx_ctl_stmt stmt = {obx_sql_audit_rows, params, 4};
    json_t *rows = NULL, *row;
    size_t i, n;
    outbox_status st;

    snprintf(max_age, sizeof(max_age), "%lld",
             a->stream.exists ? a->stream.max_age_seconds : a->cfg->stream_max_age_seconds);
    snprintf(page, sizeof(page), "%d", PAGE_ROWS);
    do {
        params[2] = cursor[0] ? cursor : NULL;
        st = obx_ctl_query(a->conn, a->cfg->schema, &stmt, &rows, &a->err);
        if (st != OUTBOX_OK) {
            return st;
        }
        json_array_foreach(rows, i, row)
        {
            check_row(a, row);
            snprintf(cursor, sizeof(cursor), "%s", obx_ctl_str(row, "id"));
        }
        n = json_array_size(rows);
        json_decref(rows);
    } while (n == PAGE_ROWS);
    return OUTBOX_OK;
}

/* Publishes the missing rows again, REPAIR_CHUNK at a time, and records every sequence. */
static outbox_status
repair(struct audit *a)
{
    struct obx_ctl_publisher *p = NULL;
    json_t *results = json_array(), *r;
    outbox_status st = obx_ctl_publisher_open(a->cfg, &p, &a->err);
    size_t i;

    for (size_t start = 0; st == OUTBOX_OK && start < json_array_size(a->missing);
         start += REPAIR_CHUNK) {
        struct obx_buf ids;

        obx_buf_init(&ids);
        for (i = start; i < json_array_size(a->missing) && i < start + REPAIR_CHUNK; i++) {
            obx_buf_appendf(&ids, "%s%s", i > start ? "," : "{",
                            json_string_value(json_array_get(a->missing, i)));
        }
        obx_buf_append_str(&ids, "}");
        {
            const char *params[] = {ids.data};
            struct obx_ctl_stmt stmt = {obx_sql_events_envelopes, params, 1};

            st = obx_buf_failed(&ids) ? OUTBOX_ENOMEM
                                      : obx_ctl_republish(p, a->conn, &stmt, results, &a->err);
        }
        obx_buf_fini(&ids);
    }
    obx_ctl_publisher_close(p);
    json_array_extend(results, a->moved);
    if (st == OUTBOX_OK) {
        st = obx_ctl_record_seqs(a->conn, a->cfg->schema, results, &a->err);
    }
    json_array_foreach(results, i, r)
    {
        if (i < json_array_size(results) - json_array_size(a->moved)) {
            a->repaired += obx_ctl_result_stored(r);
            obx_ctl_emit(a->args->json, "repaired", r, repaired_keys);
        }
    }
    json_decref(results);
    return st;
}

static void
print_summary(const struct audit *a, unsigned long long read)
{
    long long missing = (long long)json_array_size(a->missing);
    json_t *s =
        json_pack("{s:s, s:s, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:b}", "action", "audit",
                  "stream", a->cfg->stream, "stream_exists", a->stream.exists,
                  "stream_messages_read", (json_int_t)read, "rows", (json_int_t)a->rows, "present",
                  (json_int_t)a->present, "moved", (json_int_t)json_array_size(a->moved), "expired",
                  (json_int_t)a->expired, "missing", (json_int_t)missing, "repaired",
                  (json_int_t)a->repaired, "repair", a->args->repair, "dry_run", a->args->dry_run);

    if (a->args->json) {
        obx_ctl_emit(1, "summary", s, NULL);
    } else {
        printf("audit of stream %s%s: %lld retained rows checked against %llu messages: %lld "
               "present (%zu at another sequence), %lld expired by the stream's limits, %lld "
               "missing%s",
               a->cfg->stream, a->stream.exists ? "" : " (missing)", a->rows, read, a->present,
               json_array_size(a->moved), a->expired, missing, a->args->repair ? "" : "\n");
        if (a->args->repair) {
            printf(", %lld published again\n", a->repaired);
        } else if (missing > 0) {
            printf("run `outboxctl audit --repair` (or `outboxctl replay`) to publish them "
                   "again\n");
        }
    }
    json_decref(s);
}

int
obx_ctl_audit(const struct obx_config *cfg, int argc, char **argv)
{
    struct obx_ctl_args args;
    struct audit a = {.cfg = cfg, .args = &args};
    struct obx_ctl_js *js = NULL;
    unsigned long long read = 0;
    int code = obx_ctl_args_parse(
        "audit", OBX_CTL_OPT_JSON | OBX_CTL_OPT_SINCE | OBX_CTL_OPT_REPAIR | OBX_CTL_OPT_DRY_RUN, 0,
        0, argc, argv, &args);

    a.seen = json_object();
    a.missing = json_array();
    a.moved = json_array();
    if (code == 0) {
        code = obx_ctl_connect(cfg, &a.conn);
    }
    if (code == 0 && (obx_ctl_js_open(cfg, &js, &a.err) != OUTBOX_OK ||
                      obx_ctl_js_stream(js, cfg->stream, &a.stream, &a.err) != OUTBOX_OK ||
                      (a.stream.exists && obx_ctl_js_walk(js, cfg->stream, remember, &a, &read,
                                                          &a.err) != OUTBOX_OK) ||
                      check_rows(&a) != OUTBOX_OK)) {
        code = obx_ctl_fail("audit", &a.err);
    }
    obx_ctl_js_close(js);
    if (code == 0 && args.repair && args.dry_run) {
        args.repair = 0; /* --repair --dry-run: what a repair would publish is what is missing */
    }
    if (code == 0 && args.repair && (json_array_size(a.missing) > 0 || json_array_size(a.moved))) {
        if (repair(&a) != OUTBOX_OK) {
            code = obx_ctl_fail("audit --repair", &a.err);
        }
    }
    if (code == 0) {
        print_summary(&a, read);
        code = (long long)json_array_size(a.missing) > a.repaired ? 1 : 0;
    }
    json_decref(a.moved);
    json_decref(a.missing);
    json_decref(a.seen);
    obx_ctl_close(a.conn);
    obx_ctl_args_fini(&args);
    return code;
}
