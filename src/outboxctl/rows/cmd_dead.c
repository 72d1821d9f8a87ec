/* SPDX-License-Identifier: MIT */
/*
 * cmd_dead.c - `outboxctl dead list|requeue|purge|skip [filters]`.
 *
 * requeue makes each chosen dead letter run exactly once more for its
 * handler (the relay's: be published again): one statement resets the
 * ledger row and, for the relay and the DB backend, makes the outbox row
 * due again (dead_requeue.sql); after it commits, a JetStream handler's
 * event is published again under <event_id>:requeue:<n>. A terminated or
 * acked message is never delivered again by the server, and the event's
 * own id is still inside the duplicate window, so only a new message id
 * brings it back; the ledger keys on the envelope's id, so every other
 * handler skips it (done) and the requeued one runs once. A publish that
 * fails takes its requeue back (the dead letter waits again, exit 1).
 *
 * skip records each chosen dead letter's event as a gap of its ordered
 * aggregate (dead_skip.sql), so the events that wait behind it go on: the
 * relay's for every handler, a handler's for that handler. A skipped
 * event is never requeued.
 *
 * --dry-run runs the same statement and rolls it back: what it prints is
 * what a real run would change, and nothing is changed or published.
 *
 * requeue, purge and skip take a filter or --all: with neither they would act
 * on every dead letter of every handler, which a forgotten --handler must
 * not do (exit 2, nothing reached).
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "common/buf.h"
#include "outbox/worker.h"
#include "outboxctl/cli.h"
#include "outboxctl/ctl.h"
#include "outboxctl/out.h"
#include "outboxctl/query.h"
#include "republish.h"
#include "sql_gen.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { PUBLISH_CHUNK = 500 };

static const char *const list_keys[] = {
    "event_id",       "handler",      "reason",      "attempts", "dead_at", "event_type",
    "aggregate_type", "aggregate_id", "requeued_at", "skipped",  NULL};
static const char *const purge_keys[] = {"event_id", "handler", "reason",
                                         "attempts", "dead_at", NULL};
static const char *const skip_keys[] = {
    "event_id",      "handler", "aggregate_type", "aggregate_id",
    "aggregate_seq", "woken",   "reason",         NULL};
static const char *const requeue_keys[] = {
    "event_id",      "handler",   "via",          "msg_id", "stream_seq",
    "requeue_count", "row_reset", "row_restored", "reason", NULL};

struct dead_run {
    const struct obx_config *cfg;
    struct obx_ctl_args *args;
    PGconn *conn;
    const char *params[OBX_CTL_FILTER_COUNT + 1];
    outbox_error err;
};

static void
summary(int json, const char *kind, const char *text, long long count, int dry_run)
{
    json_t *s = json_pack("{s:s, s:I, s:b}", "action", kind, "count", (json_int_t)count, "dry_run",
                          dry_run);

    if (json) {
        obx_ctl_emit(1, "summary", s, NULL);
    } else {
        printf("%s %lld dead letter%s%s\n", text, count, count == 1 ? "" : "s",
               dry_run ? " (dry run: nothing changed)" : "");
    }
    json_decref(s);
}

static int
dead_list(struct dead_run *r)
{
    struct obx_ctl_stmt stmt = {obx_sql_dead_list, r->params, OBX_CTL_FILTER_COUNT};
    json_t *rows = NULL, *row;
    size_t i;

    if (obx_ctl_query(r->conn, r->cfg->schema, &stmt, &rows, &r->err) != OUTBOX_OK) {
        return obx_ctl_fail("dead list", &r->err);
    }
    json_array_foreach(rows, i, row)
    {
        obx_ctl_emit(r->args->json, "dead_letter", row, list_keys);
    }
    summary(r->args->json, "list", "listed", (long long)json_array_size(rows), 0);
    json_decref(rows);
    return 0;
}

/* Runs `stmt` inside a transaction committed, or rolled back for a dry run. */
static outbox_status
run_changing(struct dead_run *r, const struct obx_ctl_stmt *stmt, json_t **rows)
{
    outbox_status st = obx_ctl_exec(r->conn, "BEGIN", &r->err);

    if (st == OUTBOX_OK) {
        st = obx_ctl_query(r->conn, r->cfg->schema, stmt, rows, &r->err);
    }
    if (st == OUTBOX_OK && !r->args->dry_run) {
        return obx_ctl_exec(r->conn, "COMMIT", &r->err);
    }
    obx_ctl_exec(r->conn, "ROLLBACK", NULL);
    return st;
}

static int
dead_purge(struct dead_run *r)
{
    struct obx_ctl_stmt stmt = {obx_sql_dead_purge, r->params, OBX_CTL_FILTER_COUNT};
    json_t *rows = NULL, *row;
    size_t i;

    if (run_changing(r, &stmt, &rows) != OUTBOX_OK) {
        return obx_ctl_fail("dead purge", &r->err);
    }
    json_array_foreach(rows, i, row)
    {
        obx_ctl_emit(r->args->json, r->args->dry_run ? "would_purge" : "purged", row, purge_keys);
    }
    summary(r->args->json, "purge", r->args->dry_run ? "would purge" : "purged",
            (long long)json_array_size(rows), r->args->dry_run);
    json_decref(rows);
    return 0;
}

static int
dead_skip(struct dead_run *r)
{
    struct obx_ctl_stmt stmt = {obx_sql_dead_skip, r->params, OBX_CTL_FILTER_COUNT};
    json_t *rows = NULL, *row;
    size_t i, skipped = 0;

    if (run_changing(r, &stmt, &rows) != OUTBOX_OK) {
        return obx_ctl_fail("dead skip", &r->err);
    }
    json_array_foreach(rows, i, row)
    {
        int ok = json_is_true(json_object_get(row, "skipped"));

        skipped += ok;
        obx_ctl_emit(r->args->json,
                     r->args->dry_run ? (ok ? "would_skip" : "would_not_skip")
                     : ok             ? "skipped"
                                      : "not_skipped",
                     row, skip_keys);
    }
    summary(r->args->json, "skip", r->args->dry_run ? "would skip" : "skipped", (long long)skipped,
            r->args->dry_run);
    json_decref(rows);
    return 0;
}

/* `{a,b}` of field `key` of the rows that are `via_stream`, from `start`, at most `cap`. */
static void
stream_keys_of(json_t *rows, size_t start, size_t cap, const char *key, struct obx_buf *out)
{
    size_t n = 0;

    obx_buf_append_str(out, "{");
    for (size_t i = start; i < json_array_size(rows) && n < cap; i++) {
        json_t *row = json_array_get(rows, i);

        if (json_is_true(json_object_get(row, "via_stream"))) {
            obx_buf_appendf(out, "%s\"%s\"", n++ ? "," : "", obx_ctl_str(row, key));
        }
    }
    obx_buf_append_str(out, "}");
}

/* Publishes the events of one chunk of JetStream requeues; results go to `results`. */
static outbox_status
publish_chunk(struct dead_run *r, struct obx_ctl_publisher *p, json_t *rows, size_t start,
              json_t *results)
{
    struct obx_buf ids, handlers;
    outbox_status st;

    obx_buf_init(&ids);
    obx_buf_init(&handlers);
    stream_keys_of(rows, start, PUBLISH_CHUNK, "event_id", &ids);
    stream_keys_of(rows, start, PUBLISH_CHUNK, "handler", &handlers);
    if (obx_buf_failed(&ids) || obx_buf_failed(&handlers)) {
        st = OUTBOX_ENOMEM;
    } else {
        const char *params[] = {ids.data, handlers.data};
        struct obx_ctl_stmt stmt = {obx_sql_dead_envelopes, params, 2};

        st = obx_ctl_republish(p, r->conn, &stmt, results, &r->err);
    }
    obx_buf_fini(&handlers);
    obx_buf_fini(&ids);
    return st;
}

/* The publish result of (event, handler), by its message id, or NULL (never published). */
static json_t *
result_of(json_t *by_msg_id, json_t *row)
{
    char want[160];

    snprintf(want, sizeof(want), "%s:requeue:%lld", obx_ctl_str(row, "event_id"),
             obx_ctl_int(row, "requeue_count"));
    return json_object_get(by_msg_id, want);
}

/* The results keyed by their message id. */
static json_t *
index_results(json_t *results)
{
    json_t *by = json_object(), *res;
    size_t i;

    json_array_foreach(results, i, res)
    {
        if (obx_ctl_str(res, "msg_id") != NULL) {
            json_object_set(by, obx_ctl_str(res, "msg_id"), res);
        }
    }
    return by;
}

/*
 * Publishes every JetStream requeue of `rows`; sets each row's publish
 * fields, and takes back (dead_unrequeue.sql) the ones not stored.
 * Returns how many failed.
 */
static size_t
publish_requeues(struct dead_run *r, json_t *rows)
{
    struct obx_ctl_publisher *p = NULL;
    json_t *results = json_array(), *by_msg_id, *row;
    struct obx_buf ids, handlers;
    size_t failed = 0, i, seen = 0;
    outbox_status st = obx_ctl_publisher_open(r->cfg, &p, &r->err);

    for (i = 0; st == OUTBOX_OK && i < json_array_size(rows); i++) {
        if (json_is_true(json_object_get(json_array_get(rows, i), "via_stream")) &&
            seen++ % PUBLISH_CHUNK == 0) {
            st = publish_chunk(r, p, rows, i, results);
        }
    }
    obx_ctl_publisher_close(p);
    by_msg_id = index_results(results);
    obx_buf_init(&ids);
    obx_buf_init(&handlers);
    json_array_foreach(rows, i, row)
    {
        json_t *res;

        if (!json_is_true(json_object_get(row, "via_stream"))) {
            continue;
        }
        res = result_of(by_msg_id, row);
        if (res != NULL) {
            json_object_set(row, "msg_id", json_object_get(res, "msg_id"));
            json_object_set(row, "stream_seq", json_object_get(res, "stream_seq"));
        }
        if (res == NULL || !obx_ctl_result_stored(res)) {
            json_object_set_new(row, "reason",
                                json_string(res != NULL && obx_ctl_str(res, "reason") != NULL
                                                ? obx_ctl_str(res, "reason")
                                            : r->err.message[0] ? r->err.message
                                                                : "not published"));
            obx_buf_appendf(&ids, "%s%s", failed ? "," : "{", obx_ctl_str(row, "event_id"));
            obx_buf_appendf(&handlers, "%s\"%s\"", failed ? "," : "{", obx_ctl_str(row, "handler"));
            failed++;
        }
    }
    if (failed > 0) {
        const char *params[2];
        struct obx_ctl_stmt stmt = {obx_sql_dead_unrequeue, params, 2};
        json_t *none = NULL;
        outbox_error e = {0};

        obx_buf_append_str(&ids, "}");
        obx_buf_append_str(&handlers, "}");
        params[0] = ids.data;
        params[1] = handlers.data;
        if (obx_ctl_query(r->conn, r->cfg->schema, &stmt, &none, &e) != OUTBOX_OK) {
            obx_ctl_fail("dead requeue", &e);
        }
        json_decref(none);
    }
    obx_buf_fini(&handlers);
    obx_buf_fini(&ids);
    json_decref(by_msg_id);
    json_decref(results);
    return failed;
}

static const char *
via_of(json_t *row)
{
    int table = json_is_true(json_object_get(row, "via_table"));
    int stream = json_is_true(json_object_get(row, "via_stream"));

    return table && stream ? "outbox+stream" : stream ? "stream" : table ? "outbox" : "ledger";
}

static int
dead_requeue(struct dead_run *r)
{
    struct obx_ctl_stmt stmt = {obx_sql_dead_requeue, r->params, OBX_CTL_FILTER_COUNT + 1};
    json_t *rows = NULL, *row;
    size_t i, failed = 0, via_stream = 0;

    r->params[OBX_CTL_FILTER_COUNT] = r->cfg->bus == OUTBOX_BUS_DB ? "db" : "jetstream";
    if (run_changing(r, &stmt, &rows) != OUTBOX_OK) {
        return obx_ctl_fail("dead requeue", &r->err);
    }
    json_array_foreach(rows, i, row)
    {
        via_stream += json_is_true(json_object_get(row, "via_stream"));
        json_object_set_new(row, "via", json_string(via_of(row)));
        if (!json_is_true(json_object_get(row, "has_envelope"))) {
            json_object_set_new(row, "reason",
                                json_string("no outbox row and no envelope kept: nothing to "
                                            "deliver (the ledger row was reset)"));
            failed++;
        }
    }
    if (via_stream > 0 && !r->args->dry_run) {
        failed += publish_requeues(r, rows);
    }
    json_array_foreach(rows, i, row)
    {
        int ok = json_object_get(row, "reason") == NULL;

        obx_ctl_emit(r->args->json,
                     r->args->dry_run ? "would_requeue"
                     : ok             ? "requeued"
                                      : "requeue_failed",
                     row, requeue_keys);
    }
    summary(r->args->json, "requeue", r->args->dry_run ? "would requeue" : "requeued",
            (long long)(json_array_size(rows) - failed), r->args->dry_run);
    if (failed > 0) {
        fprintf(stderr,
                "outboxctl dead requeue: %zu dead letter%s could not be published again and "
                "wait as before: run it again once NATS answers\n",
                failed, failed == 1 ? "" : "s");
    }
    json_decref(rows);
    return failed > 0 ? 1 : 0;
}

int
obx_ctl_dead(const struct obx_config *cfg, int argc, char **argv)
{
    struct obx_ctl_args args;
    struct dead_run r = {.cfg = cfg, .args = &args};
    const char *sub;
    int code = obx_ctl_args_parse(
        "dead", OBX_CTL_OPT_JSON | OBX_CTL_OPT_DRY_RUN | OBX_CTL_OPT_ALL | OBX_CTL_OPT_FILTERS, 1,
        1, argc, argv, &args);

    sub = args.positional[0];
    if (code == 0 && strcmp(sub, "list") != 0 && strcmp(sub, "requeue") != 0 &&
        strcmp(sub, "purge") != 0 && strcmp(sub, "skip") != 0) {
        fprintf(stderr, "outboxctl dead: \"%.40s\" is not list, requeue, purge or skip\n", sub);
        code = 2;
    }
    if (code == 0 && (args.dry_run || args.all) && strcmp(sub, "list") == 0) {
        fprintf(stderr, "outboxctl dead list: --%s is for requeue, purge and skip\n",
                args.dry_run ? "dry-run" : "all");
        code = 2;
    }
    if (code == 0 && strcmp(sub, "list") != 0) {
        char verb[16];

        snprintf(verb, sizeof(verb), "dead %s", sub);
        code = obx_ctl_args_require_scope(verb, "dead letter of every handler", &args);
    }
    if (code == 0) {
        code = obx_ctl_connect(cfg, &r.conn);
    }
    if (code == 0) {
        obx_ctl_filter_params(&args, r.params);
        code = sub[0] == 'l'   ? dead_list(&r)
               : sub[0] == 'p' ? dead_purge(&r)
               : sub[0] == 's' ? dead_skip(&r)
                               : dead_requeue(&r);
    }
    obx_ctl_close(r.conn);
    obx_ctl_args_fini(&args);
    return code;
}
