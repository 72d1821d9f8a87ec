/* SPDX-License-Identifier: MIT */
/*
 * cmd_subject.c - a data subject's rows: `outboxctl export --data-subject S`
 * prints its queued events, retained rows and dead letters as JSON lines;
 * `outboxctl erase --data-subject S [--dry-run] [--scan-stream]` removes
 * them (subject_erase.sql), logs the erasure with its counts (the erasures
 * table keeps the subject's SHA-256, never the subject) and reports what
 * the stream still holds of the subject, with its max_age: the stream
 * denies deletes, so those messages go when they expire. By default the
 * stream is asked for the sequences the erased rows recorded; --scan-stream
 * reads the whole stream too, for rows pruned before the erasure. Events of
 * other subjects are untouched.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "outbox/worker.h"
#include "outboxctl/cli.h"
#include "outboxctl/ctl.h"
#include "outboxctl/out.h"
#include "outboxctl/query.h"
#include "outboxctl/stream/js_admin.h"
#include "sql_gen.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static const char *const erased_keys[] = {"event_id", "status", "handler", "stream_seq", NULL};
static const char *const held_keys[] = {"event_id", "seq", "stored_at", "expires_by", NULL};

int
obx_ctl_export(const struct obx_config *cfg, int argc, char **argv)
{
    struct obx_ctl_args args;
    json_t *events = NULL, *letters = NULL, *row;
    outbox_error err = {0};
    PGconn *conn = NULL;
    size_t i;
    int code = obx_ctl_args_parse("export", OBX_CTL_OPT_JSON | OBX_CTL_OPT_DATA_SUBJECT, 0, 0, argc,
                                  argv, &args);

    if (code == 0) {
        code = obx_ctl_connect(cfg, &conn);
    }
    if (code == 0) {
        const char *params[] = {args.data_subject};
        struct obx_ctl_stmt ev = {obx_sql_subject_events, params, 1};
        struct obx_ctl_stmt dl = {obx_sql_subject_dead_letters, params, 1};

        if (obx_ctl_query(conn, cfg->schema, &ev, &events, &err) != OUTBOX_OK ||
            obx_ctl_query(conn, cfg->schema, &dl, &letters, &err) != OUTBOX_OK) {
            code = obx_ctl_fail("export", &err);
        }
    }
    /* JSON lines whatever --json says: an export is for machines and archives. */
    json_array_foreach(events, i, row)
    {
        obx_ctl_emit(1, "event", row, NULL);
    }
    json_array_foreach(letters, i, row)
    {
        obx_ctl_emit(1, "dead_letter", row, NULL);
    }
    json_decref(letters);
    json_decref(events);
    obx_ctl_close(conn);
    obx_ctl_args_fini(&args);
    return code;
}

/* Unix milliseconds as ISO 8601 UTC. */
static json_t *
iso_time(long long unix_ms)
{
    char out[40];
    time_t t = (time_t)(unix_ms / 1000);
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(out, sizeof(out), "%Y-%m-%dT%H:%M:%SZ", &tm);
    return json_string(out);
}

struct erase {
    const struct obx_config *cfg;
    struct obx_ctl_args *args;
    struct obx_ctl_js *js;
    struct obx_ctl_stream stream;
    json_t *held; /* seq (as text) -> {event_id, seq, stored_at, expires_by} */
    outbox_error err;
};

static void
hold(struct erase *e, const char *event_id, unsigned long long seq, long long stored_ms)
{
    char key[24];

    snprintf(key, sizeof(key), "%llu", seq);
    if (json_object_get(e->held, key) != NULL) {
        return; /* found by its sequence already */
    }
    json_object_set_new(e->held, key,
                        json_pack("{s:s, s:I, s:o, s:o}", "event_id", event_id, "seq",
                                  (json_int_t)seq, "stored_at", iso_time(stored_ms), "expires_by",
                                  e->stream.max_age_seconds > 0
                                      ? iso_time(stored_ms + e->stream.max_age_seconds * 1000)
                                      : json_null()));
}

/* The erased rows' recorded sequences that still hold their event. */
static outbox_status
check_sequences(struct erase *e, json_t *rows)
{
    size_t i;
    json_t *row;

    json_array_foreach(rows, i, row)
    {
        json_t *seq = json_object_get(row, "stream_seq");
        struct obx_ctl_js_msg m;
        const char *id = obx_ctl_str(row, "event_id");

        if (strcmp(obx_ctl_str(row, "item"), "event") != 0 || !json_is_integer(seq)) {
            continue;
        }
        if (obx_ctl_js_message(e->js, e->cfg->stream, (unsigned long long)json_integer_value(seq),
                               &m, &e->err) != OUTBOX_OK) {
            return e->err.code;
        }
        if (m.found && strcmp(m.msg_id, id) == 0) {
            hold(e, id, (unsigned long long)json_integer_value(seq), m.unix_ms);
        }
    }
    return OUTBOX_OK;
}

/* --scan-stream: a message whose envelope names the subject (a requeue's copy too). */
static int
scan_one(void *ctx, const struct obx_ctl_js_seen *m)
{
    struct erase *e = ctx;
    json_t *env = json_loadb(m->data, m->len, 0, NULL);
    const char *subject = json_string_value(json_object_get(env, "data_subject"));
    const char *id = json_string_value(json_object_get(env, "id"));

    if (subject != NULL && strcmp(subject, e->args->data_subject) == 0) {
        hold(e, id != NULL ? id : m->msg_id, m->seq, m->unix_ms);
    }
    json_decref(env);
    return 0;
}

/* What the stream still holds of the subject, into e->held; OUTBOX_OK on the DB backend. */
static outbox_status
check_stream(struct erase *e, json_t *rows)
{
    unsigned long long read = 0;
    outbox_status st;

    if (e->cfg->bus == OUTBOX_BUS_DB) {
        return OUTBOX_OK;
    }
    st = obx_ctl_js_open(e->cfg, &e->js, &e->err);
    if (st == OUTBOX_OK) {
        st = obx_ctl_js_stream(e->js, e->cfg->stream, &e->stream, &e->err);
    }
    if (st == OUTBOX_OK && e->stream.exists) {
        st = check_sequences(e, rows);
    }
    if (st == OUTBOX_OK && e->stream.exists && e->args->scan_stream) {
        st = obx_ctl_js_walk(e->js, e->cfg->stream, scan_one, e, &read, &e->err);
    }
    return st;
}

/* Prints the erased rows, what the stream holds, and logs the erasure. */
static void
report(struct erase *e, json_t *rows, json_t *erasure)
{
    const char *prefix = e->args->dry_run ? "would_erase_" : "erased_";
    char kind[40];
    const char *key;
    size_t i;
    json_t *row, *summary;

    json_array_foreach(rows, i, row)
    {
        if (strcmp(obx_ctl_str(row, "item"), "erasure") != 0) {
            snprintf(kind, sizeof(kind), "%s%s", prefix, obx_ctl_str(row, "item"));
            json_object_del(row, "item");
            json_object_del(row, "erasure_id");
            json_object_del(row, "subject_sha256");
            json_object_del(row, "events");
            json_object_del(row, "dead_letters");
            json_object_del(row, "ledger_rows");
            obx_ctl_emit(e->args->json, kind, row, erased_keys);
        }
    }
    json_object_foreach(e->held, key, row)
    {
        obx_ctl_emit(e->args->json, "stream_message", row, held_keys);
    }
    summary = json_pack("{s:s, s:b, s:O, s:O, s:O, s:I, s:s, s:I}", "action", "erase", "dry_run",
                        e->args->dry_run, "events", json_object_get(erasure, "events"),
                        "dead_letters", json_object_get(erasure, "dead_letters"), "ledger_rows",
                        json_object_get(erasure, "ledger_rows"), "stream_messages",
                        (json_int_t)json_object_size(e->held), "stream", e->cfg->stream,
                        "stream_max_age_seconds", (json_int_t)e->stream.max_age_seconds);
    if (!e->args->dry_run) {
        json_object_set(summary, "erasure_id", json_object_get(erasure, "erasure_id"));
    }
    if (e->args->json) {
        obx_ctl_emit(1, "summary", summary, NULL);
    } else {
        printf("%s %lld events, %lld dead letters and the errors of %lld ledger rows of the data "
               "subject; the stream %s still holds %zu of its messages (it denies deletes: they "
               "go at its max_age, %lld s)%s\n",
               e->args->dry_run ? "would erase" : "erased", obx_ctl_int(erasure, "events"),
               obx_ctl_int(erasure, "dead_letters"), obx_ctl_int(erasure, "ledger_rows"),
               e->cfg->stream, json_object_size(e->held), e->stream.max_age_seconds,
               e->args->dry_run ? " (dry run: nothing changed)" : "");
    }
    if (!e->args->dry_run) {
        fprintf(stderr,
                "level=info erasure done erasure_id=%lld subject_sha256=%s events=%lld "
                "dead_letters=%lld ledger_rows=%lld stream_messages=%zu\n",
                obx_ctl_int(erasure, "erasure_id"), obx_ctl_str(erasure, "subject_sha256"),
                obx_ctl_int(erasure, "events"), obx_ctl_int(erasure, "dead_letters"),
                obx_ctl_int(erasure, "ledger_rows"), json_object_size(e->held));
    }
    json_decref(summary);
}

/* The statement's 'erasure' item: the erasures row and its counts. */
static json_t *
erasure_of(json_t *rows)
{
    size_t i;
    json_t *row;

    json_array_foreach(rows, i, row)
    {
        if (strcmp(obx_ctl_str(row, "item"), "erasure") == 0) {
            return row;
        }
    }
    return NULL;
}

/* The erase statement, committed or (dry run) rolled back. */
static outbox_status
erase_rows(struct erase *e, PGconn *conn, json_t **rows)
{
    const char *params[] = {e->args->data_subject};
    struct obx_ctl_stmt stmt = {obx_sql_subject_erase, params, 1};
    outbox_status st = obx_ctl_exec(conn, "BEGIN", &e->err);

    if (st == OUTBOX_OK) {
        st = obx_ctl_query(conn, e->cfg->schema, &stmt, rows, &e->err);
    }
    if (st == OUTBOX_OK && !e->args->dry_run) {
        return obx_ctl_exec(conn, "COMMIT", &e->err);
    }
    obx_ctl_exec(conn, "ROLLBACK", NULL);
    return st;
}

int
obx_ctl_erase(const struct obx_config *cfg, int argc, char **argv)
{
    struct obx_ctl_args args;
    struct erase e = {.cfg = cfg, .args = &args};
    json_t *rows = NULL;
    PGconn *conn = NULL;
    char count[24];
    int code = obx_ctl_args_parse("erase",
                                  OBX_CTL_OPT_JSON | OBX_CTL_OPT_DRY_RUN |
                                      OBX_CTL_OPT_DATA_SUBJECT | OBX_CTL_OPT_SCAN_STREAM,
                                  0, 0, argc, argv, &args);

    e.held = json_object();
    if (code == 0) {
        code = obx_ctl_connect(cfg, &conn);
    }
    if (code == 0 && erase_rows(&e, conn, &rows) != OUTBOX_OK) {
        code = obx_ctl_fail("erase", &e.err);
    }
    if (code == 0 && check_stream(&e, rows) != OUTBOX_OK) {
        fprintf(stderr,
                "outboxctl erase: the stream could not be read (%s): what it still holds "
                "of the subject is unknown; run again with NATS up%s\n",
                e.err.message, args.dry_run ? "" : " (the tables are erased)");
        code = 1;
    }
    if (rows != NULL) {
        json_t *erasure = erasure_of(rows);

        report(&e, rows, erasure);
        if (!args.dry_run) {
            char id[24];
            const char *params[] = {id, count};
            struct obx_ctl_stmt stmt = {obx_sql_subject_erasure_stream, params, 2};
            json_t *none = NULL;

            snprintf(id, sizeof(id), "%lld", obx_ctl_int(erasure, "erasure_id"));
            snprintf(count, sizeof(count), "%zu", json_object_size(e.held));
            if (code == 0 && obx_ctl_query(conn, cfg->schema, &stmt, &none, &e.err) != OUTBOX_OK) {
                code = obx_ctl_fail("erase", &e.err);
            }
            json_decref(none);
        }
    }
    obx_ctl_js_close(e.js);
    json_decref(rows);
    json_decref(e.held);
    obx_ctl_close(conn);
    obx_ctl_args_fini(&args);
    return code;
}
