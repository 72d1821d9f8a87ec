/* SPDX-License-Identifier: MIT */
/*
 * cmd_trace.c - `outboxctl trace EVENT_ID [--json]`: everything about one
 * event. The outbox row (status, attempts, lease expiries, last error,
 * times, stream sequence; for an ordered event its number and the event it
 * waits for, if any); the message at that sequence, fetched from the
 * stream and checked to carry the event's Nats-Msg-Id; every handler's
 * ledger row; its dead letters. Exit 1 when none of them knows the event.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "outbox/worker.h"
#include "outboxctl/cli.h"
#include "outboxctl/ctl.h"
#include "outboxctl/out.h"
#include "outboxctl/query.h"
#include "outboxctl/stream/js_admin.h"
#include "sql_gen.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static const char *const event_keys[] = {
    "id",         "status",         "event_type",       "aggregate_type",   "aggregate_seq",
    "attempts",   "lease_expiries", "last_error",       "created_at",       "published_at",
    "stream_seq", "waits_for",      "waits_for_status", "waits_for_reason", NULL};
static const char *const stream_keys[] = {"stream",  "seq",  "found", "msg_id",
                                          "matches", "note", NULL};
static const char *const ledger_keys[] = {"handler",     "status",     "attempts",
                                          "owner_token", "started_at", "dead_at",
                                          "finished_at", "last_error", NULL};
static const char *const letter_keys[] = {"handler",     "reason",        "attempts", "dead_at",
                                          "requeued_at", "requeue_count", NULL};

/* The message the row's stream_seq names, and whether it is this event's. */
static json_t *
stream_line(const struct obx_config *cfg, const char *id, long long seq)
{
    struct obx_ctl_js *js = NULL;
    struct obx_ctl_js_msg m;
    outbox_error err = {0};
    json_t *line = json_pack("{s:s, s:I}", "stream", cfg->stream, "seq", (json_int_t)seq);

    if (obx_ctl_js_open(cfg, &js, &err) != OUTBOX_OK ||
        obx_ctl_js_message(js, cfg->stream, (unsigned long long)seq, &m, &err) != OUTBOX_OK) {
        json_object_set_new(line, "note", json_string(err.message));
    } else if (!m.found) {
        json_object_set_new(line, "found", json_false());
        json_object_set_new(line, "note",
                            json_string("the stream no longer holds this sequence "
                                        "(past max_age, or the stream was lost): "
                                        "outboxctl audit"));
    } else {
        int matches = strcmp(m.msg_id, id) == 0;

        json_object_set_new(line, "found", json_true());
        json_object_set_new(line, "msg_id", json_string(m.msg_id));
        json_object_set_new(line, "subject", json_string(m.subject));
        json_object_set_new(line, "matches", json_boolean(matches));
        if (!matches) {
            json_object_set_new(line, "note",
                                json_string("another message holds this sequence (the stream "
                                            "was recreated?): outboxctl audit --repair"));
        }
    }
    obx_ctl_js_close(js);
    return line;
}

/* Prints every row of `rows` as `kind`; returns how many. */
static size_t
emit_all(int json, const char *kind, json_t *rows, const char *const *keys)
{
    size_t i;
    json_t *row;

    json_array_foreach(rows, i, row)
    {
        obx_ctl_emit(json, kind, row, keys);
    }
    return json_array_size(rows);
}

struct trace_rows {
    json_t *event, *ledger, *letters;
};

static outbox_status
read_rows(PGconn *conn, const char *schema, const char *id, struct trace_rows *t, outbox_error *err)
{
    const char *params[] = {id};
    struct obx_ctl_stmt event = {obx_sql_trace_event, params, 1};
    struct obx_ctl_stmt ledger = {obx_sql_trace_ledger, params, 1};
    struct obx_ctl_stmt letters = {obx_sql_trace_dead_letters, params, 1};
    outbox_status st = obx_ctl_query_one(conn, schema, &event, &t->event, err);

    if (st == OUTBOX_OK) {
        st = obx_ctl_query(conn, schema, &ledger, &t->ledger, err);
    }
    if (st == OUTBOX_OK) {
        st = obx_ctl_query(conn, schema, &letters, &t->letters, err);
    }
    return st;
}

int
obx_ctl_trace(const struct obx_config *cfg, int argc, char **argv)
{
    struct obx_ctl_args args;
    struct trace_rows t = {NULL, NULL, NULL};
    outbox_error err = {0};
    PGconn *conn = NULL;
    const char *id;
    size_t found = 0;
    int code = obx_ctl_args_parse("trace", OBX_CTL_OPT_JSON, 1, 1, argc, argv, &args);

    id = args.positional[0];
    if (code == 0 && !obx_ctl_uuid_valid(id)) {
        fprintf(stderr, "outboxctl trace: EVENT_ID \"%.80s\" is not a UUID\n", id);
        code = 2;
    }
    if (code == 0) {
        code = obx_ctl_connect(cfg, &conn);
    }
    if (code == 0 && read_rows(conn, cfg->schema, id, &t, &err) != OUTBOX_OK) {
        code = obx_ctl_fail("trace", &err);
    }
    obx_ctl_close(conn);
    if (code == 0 && t.event != NULL) {
        json_t *seq = json_object_get(t.event, "stream_seq");

        obx_ctl_emit(args.json, "event", t.event, event_keys);
        found++;
        if (json_is_integer(seq) && cfg->bus == OUTBOX_BUS_JETSTREAM) {
            json_t *line = stream_line(cfg, id, (long long)json_integer_value(seq));

            obx_ctl_emit(args.json, "stream", line, stream_keys);
            json_decref(line);
        }
    }
    if (code == 0) {
        found += emit_all(args.json, "ledger", t.ledger, ledger_keys);
        found += emit_all(args.json, "dead_letter", t.letters, letter_keys);
        if (found == 0) {
            fprintf(stderr,
                    "outboxctl trace: event %s not found (no outbox row, no ledger row, "
                    "no dead letter)\n",
                    id);
            code = 1;
        }
    }
    json_decref(t.letters);
    json_decref(t.ledger);
    json_decref(t.event);
    obx_ctl_args_fini(&args);
    return code;
}
