/* SPDX-License-Identifier: MIT */
/*
 * cmd_subjects.c - `outboxctl subjects [--json]`: subject coverage,
 * published against subscribed. Published: the subjects of the outbox's
 * retained rows and of the messages the stream holds (its retention).
 * Subscribed: the filters of the handlers running consumers registered
 * (the handlers table; a binding not refreshed for 15 minutes belongs to a
 * consumer that stopped and is listed as stale, not counted). An orphan
 * publish is a subject no live filter matches; a dead subscription a live
 * filter that matches nothing published. Exit 1 when either exists, so a
 * CI step can gate on it.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "envelope/subject.h"
#include "outbox/worker.h"
#include "outboxctl/cli.h"
#include "outboxctl/ctl.h"
#include "outboxctl/out.h"
#include "outboxctl/query.h"
#include "outboxctl/stream/js_admin.h"
#include "sql_gen.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* Three maintenance passes of a consumer (every 5 minutes): then it has stopped. */
#define STALE_AFTER_SECONDS "900"

static const char *const subject_keys[] = {"subject", "outbox_rows", "stream_messages", "handlers",
                                           NULL};
static const char *const handler_keys[] = {
    "name", "subject_filter", "consumer_group", "backend", "last_seen", "matches", NULL};

/* subject -> {subject, outbox_rows, stream_messages, handlers: []} */
static json_t *
subject_entry(json_t *subjects, const char *subject)
{
    json_t *e = json_object_get(subjects, subject);

    if (e == NULL) {
        e = json_pack("{s:s, s:I, s:I, s:[]}", "subject", subject, "outbox_rows", (json_int_t)0,
                      "stream_messages", (json_int_t)0, "handlers");
        json_object_set_new(subjects, subject, e);
    }
    return e;
}

/* What is published: the outbox's rows, and the stream's messages when NATS answers. */
static outbox_status
read_published(const struct obx_config *cfg, PGconn *conn, json_t *subjects, outbox_error *err)
{
    const char *params[] = {cfg->subject_prefix};
    struct obx_ctl_stmt stmt = {obx_sql_subjects_published, params, 1};
    struct obx_ctl_js *js = NULL;
    json_t *rows = NULL, *row, *counts = NULL, *count;
    const char *subject;
    size_t i;
    outbox_status st = obx_ctl_query(conn, cfg->schema, &stmt, &rows, err);

    json_array_foreach(rows, i, row)
    {
        json_object_set(subject_entry(subjects, obx_ctl_str(row, "subject")), "outbox_rows",
                        json_object_get(row, "outbox_rows"));
    }
    json_decref(rows);
    if (st != OUTBOX_OK || cfg->bus == OUTBOX_BUS_DB) {
        return st;
    }
    st = obx_ctl_js_open(cfg, &js, err);
    if (st == OUTBOX_OK) {
        st = obx_ctl_js_subject_counts(js, cfg->stream, &counts, err);
    }
    obx_ctl_js_close(js);
    json_object_foreach(counts, subject, count)
    {
        json_object_set(subject_entry(subjects, subject), "stream_messages", count);
    }
    json_decref(counts);
    return st;
}

struct coverage {
    long long orphans, dead, stale;
};

/* Matches every live filter against every subject; prints handlers and subjects. */
static void
match_all(int json, json_t *handlers, json_t *subjects, struct coverage *c)
{
    const char *subject;
    json_t *h, *s;
    size_t i;

    json_array_foreach(handlers, i, h)
    {
        long long matches = 0;

        if (!json_is_true(json_object_get(h, "live"))) {
            c->stale++;
            obx_ctl_emit(json, "stale_handler", h, handler_keys);
            continue;
        }
        json_object_foreach(subjects, subject, s)
        {
            if (obx_subject_matches(obx_ctl_str(h, "subject_filter"), subject)) {
                json_array_append_new(json_object_get(s, "handlers"),
                                      json_string(obx_ctl_str(h, "name")));
                matches++;
            }
        }
        json_object_set_new(h, "matches", json_integer((json_int_t)matches));
        obx_ctl_emit(json, matches > 0 ? "handler" : "dead_subscription", h, handler_keys);
        c->dead += matches == 0;
    }
    json_object_foreach(subjects, subject, s)
    {
        int orphan = json_array_size(json_object_get(s, "handlers")) == 0;

        obx_ctl_emit(json, orphan ? "orphan_publish" : "subject", s, subject_keys);
        c->orphans += orphan;
    }
}

int
obx_ctl_subjects(const struct obx_config *cfg, int argc, char **argv)
{
    struct obx_ctl_args args;
    const char *params[] = {STALE_AFTER_SECONDS};
    struct obx_ctl_stmt stmt = {obx_sql_subjects_handlers, params, 1};
    struct coverage c = {0, 0, 0};
    json_t *subjects = json_object(), *handlers = NULL, *s;
    outbox_error err = {0};
    PGconn *conn = NULL;
    int code = obx_ctl_args_parse("subjects", OBX_CTL_OPT_JSON, 0, 0, argc, argv, &args);

    if (code == 0) {
        code = obx_ctl_connect(cfg, &conn);
    }
    if (code == 0 && (obx_ctl_query(conn, cfg->schema, &stmt, &handlers, &err) != OUTBOX_OK ||
                      read_published(cfg, conn, subjects, &err) != OUTBOX_OK)) {
        code = obx_ctl_fail("subjects", &err);
    }
    if (code == 0) {
        match_all(args.json, handlers, subjects, &c);
        s = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I}", "action", "subjects", "subjects",
                      (json_int_t)json_object_size(subjects), "handlers",
                      (json_int_t)(json_array_size(handlers) - (size_t)c.stale), "orphan_publishes",
                      (json_int_t)c.orphans, "dead_subscriptions", (json_int_t)c.dead,
                      "stale_handlers", (json_int_t)c.stale);
        if (args.json) {
            obx_ctl_emit(1, "summary", s, NULL);
        } else {
            printf("%zu subjects published, %zu live handler bindings: %lld orphan publishes, "
                   "%lld dead subscriptions (%lld stale bindings ignored)\n",
                   json_object_size(subjects), json_array_size(handlers) - (size_t)c.stale,
                   c.orphans, c.dead, c.stale);
        }
        json_decref(s);
        code = c.orphans + c.dead > 0 ? 1 : 0;
    }
    json_decref(handlers);
    json_decref(subjects);
    obx_ctl_close(conn);
    obx_ctl_args_fini(&args);
    return code;
}
