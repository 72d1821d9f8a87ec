/* SPDX-License-Identifier: MIT */
/*
 * cmd_status.c - `outboxctl status [--json]`: the outbox's row counts, the
 * age of the oldest due row, dead letters per handler, lease expiries, the
 * ledger's claims and the ordered aggregates held up at a head; and when NATS answers, the stream's
 * message count and sequences and each durable consumer's pending and ack-pending counts.
 *
 * --json prints one object (the DESIGN contract: pending, leased, done,
 * dead, invalid, oldest_pending_age_s, and more). A NATS that cannot be
 * reached is reported (nats_error), not a failure: the database's part
 * is what an alert needs first.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ctl.h"
#include "out.h"
#include "outbox/worker.h"
#include "outboxctl/stream/js_admin.h"
#include "query.h"
#include "sql_gen.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* The stream and its consumers into `doc` (or nats_error). */
static void
add_stream(const struct obx_config *cfg, json_t *doc)
{
    struct obx_ctl_js *js = NULL;
    struct obx_ctl_stream s;
    json_t *consumers = NULL;
    outbox_error err = {0};

    if (obx_ctl_js_open(cfg, &js, &err) != OUTBOX_OK ||
        obx_ctl_js_stream(js, cfg->stream, &s, &err) != OUTBOX_OK ||
        (s.exists && obx_ctl_js_consumers(js, cfg->stream, &consumers, &err) != OUTBOX_OK)) {
        json_object_set_new(doc, "stream", json_null());
        json_object_set_new(doc, "nats_error", json_string(err.message));
        obx_ctl_js_close(js);
        return;
    }
    obx_ctl_js_close(js);
    if (!s.exists) {
        json_object_set_new(doc, "stream", json_null());
        json_object_set_new(doc, "nats_error", json_string("no such stream"));
        return;
    }
    json_object_set_new(doc, "stream",
                        json_pack("{s:s, s:I, s:I, s:I, s:I}", "name", cfg->stream, "messages",
                                  (json_int_t)s.messages, "bytes", (json_int_t)s.bytes, "first_seq",
                                  (json_int_t)s.first_seq, "last_seq", (json_int_t)s.last_seq));
    json_object_set_new(doc, "consumers", consumers);
}

/* The ordered aggregates held up at a head, one line each. */
static void
print_blocked(json_t *blocked)
{
    char a[64], b[64], c[64];
    json_t *row;
    size_t i;

    printf("  blocked aggregates         %zu%s\n", json_array_size(blocked),
           json_array_size(blocked) >= 100 ? " (the 100 held longest)" : "");
    json_array_foreach(blocked, i, row)
    {
        const char *handler = obx_ctl_str(row, "handler"), *reason = obx_ctl_str(row, "reason");

        printf("    %-10s %s %s at seq %s (event %s): %s%s%s; %s waiting, held %s s\n",
               handler[0] ? handler : "(relay)", obx_ctl_str(row, "aggregate_type"),
               obx_ctl_str(row, "aggregate_id"), obx_ctl_text(row, "head_seq", a, 64),
               obx_ctl_str(row, "head_event_id"), obx_ctl_str(row, "head_status"),
               reason[0] ? ", " : "", reason, obx_ctl_text(row, "waiting", b, 64),
               obx_ctl_text(row, "held_s", c, 64));
    }
}

static void
print_text(const char *schema, json_t *d)
{
    char a[64], b[64], c[64];
    json_t *by = json_object_get(d, "dead_letters_by_handler"), *v, *stream, *consumer;
    const char *handler;
    size_t i;

    printf("schema %s (migration %s)\n", schema, obx_ctl_text(d, "schema_version", a, sizeof(a)));
    printf("  pending   %s (of which %s waiting to retry)\n", obx_ctl_text(d, "pending", a, 64),
           obx_ctl_text(d, "backing_off", b, 64));
    printf("  leased    %s (%s with the lease run out)\n", obx_ctl_text(d, "leased", a, 64),
           obx_ctl_text(d, "expired_leases", b, 64));
    printf("  done      %s\n  dead      %s\n  invalid   %s%s\n", obx_ctl_text(d, "done", a, 64),
           obx_ctl_text(d, "dead", b, 64), obx_ctl_text(d, "invalid", c, 64),
           obx_ctl_int(d, "invalid") > 0 ? " (quarantined: outboxctl quarantine list)" : "");
    printf("  oldest due row             %.1f s\n",
           json_number_value(json_object_get(d, "oldest_pending_age_s")));
    printf("  lease expiries (unfinished rows)  %s\n", obx_ctl_text(d, "lease_expiries", a, 64));
    printf("  dead letters not requeued  %s\n", obx_ctl_text(d, "dead_letters", a, 64));
    json_object_foreach(by, handler, v)
    {
        printf("    %-24s %lld\n", handler[0] ? handler : "(relay)",
               (long long)json_integer_value(v));
    }
    printf("  ledger claims: %s in progress, %s backing off, %s expired\n",
           obx_ctl_text(d, "ledger_in_progress", a, 64),
           obx_ctl_text(d, "ledger_backing_off", b, 64),
           obx_ctl_text(d, "ledger_expired_claims", c, 64));
    print_blocked(json_object_get(d, "blocked_aggregates"));
    stream = json_object_get(d, "stream");
    if (json_is_object(stream)) {
        printf("stream %s: %s messages, sequences %s to %s\n", obx_ctl_str(stream, "name"),
               obx_ctl_text(stream, "messages", a, 64), obx_ctl_text(stream, "first_seq", b, 64),
               obx_ctl_text(stream, "last_seq", c, 64));
        json_array_foreach(json_object_get(d, "consumers"), i, consumer)
        {
            printf("  consumer %-20s %s pending, %s ack pending\n", obx_ctl_str(consumer, "name"),
                   obx_ctl_text(consumer, "num_pending", a, 64),
                   obx_ctl_text(consumer, "num_ack_pending", b, 64));
        }
    } else if (json_object_get(d, "nats_error") != NULL) {
        printf("stream: %s\n", obx_ctl_str(d, "nats_error"));
    }
}

/* The database's part of the status into a new object `*out`. */
static outbox_status
read_counts(PGconn *conn, const char *schema, json_t **out, outbox_error *err)
{
    struct obx_ctl_stmt counts = {obx_sql_status_counts, NULL, 0};
    struct obx_ctl_stmt letters = {obx_sql_status_dead_letters, NULL, 0};
    struct obx_ctl_stmt blocked = {obx_sql_status_blocked_aggregates, NULL, 0};
    json_t *doc = NULL, *rows = NULL, *held = NULL, *by, *row;
    outbox_status st = obx_ctl_query_one(conn, schema, &counts, &doc, err);
    size_t i;

    if (st == OUTBOX_OK) {
        st = obx_ctl_query(conn, schema, &letters, &rows, err);
    }
    if (st == OUTBOX_OK) {
        st = obx_ctl_query(conn, schema, &blocked, &held, err);
    }
    if (st != OUTBOX_OK) {
        json_decref(doc);
        json_decref(rows);
        return st;
    }
    json_object_set_new(doc, "blocked_aggregates", held);
    by = json_object();
    json_array_foreach(rows, i, row)
    {
        json_object_set(by, obx_ctl_str(row, "handler"), json_object_get(row, "dead_letters"));
    }
    json_object_set_new(doc, "dead_letters_by_handler", by);
    json_decref(rows);
    *out = doc;
    return OUTBOX_OK;
}

int
obx_ctl_status(const struct obx_config *cfg, int argc, char **argv)
{
    struct obx_ctl_args args;
    json_t *doc = NULL, *line;
    outbox_error err = {0};
    PGconn *conn = NULL;
    int code = obx_ctl_args_parse("status", OBX_CTL_OPT_JSON, 0, 0, argc, argv, &args);

    if (code == 0) {
        code = obx_ctl_connect(cfg, &conn);
    }
    if (code == 0 && read_counts(conn, cfg->schema, &doc, &err) != OUTBOX_OK) {
        code = obx_ctl_fail("status", &err);
    }
    obx_ctl_close(conn);
    if (code == 0 && cfg->bus == OUTBOX_BUS_JETSTREAM) {
        add_stream(cfg, doc);
    }
    if (code == 0 && args.json) {
        line = json_pack("{s:s}", "schema", cfg->schema);
        json_object_update(line, doc);
        json_dumpf(line, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(line);
    } else if (code == 0) {
        print_text(cfg->schema, doc);
    }
    json_decref(doc);
    obx_ctl_args_fini(&args);
    return code;
}
