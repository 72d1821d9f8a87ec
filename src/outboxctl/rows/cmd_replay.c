/* SPDX-License-Identifier: MIT */
/*
 * cmd_replay.c - `outboxctl replay [filters] [--dry-run] [--json]`: the
 * retained rows (mark mode, status done) published again under their own
 * Nats-Msg-Id, the way back after a broker lost messages or a stream was
 * deleted (a missing stream is created with the relay's settings first).
 *
 * Inside the duplicate window the stream drops what it still has (the
 * PubAck says duplicate); what it lost is stored again, and consumers'
 * ledgers, keyed by the envelope's id, skip every event a handler already
 * ran: a replay never causes a second handler effect. Each row's new
 * sequence is recorded (stream_seq). Pages of rows in id order; --limit
 * counts across pages. Exit 1 if any row could not be published.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxctl/cli.h"
#include "outboxctl/ctl.h"
#include "outboxctl/out.h"
#include "outboxctl/query.h"
#include "republish.h"
#include "sql_gen.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { PAGE_ROWS = 500 };

static const char *const result_keys[] = {"id", "outcome", "stream_seq", "reason", NULL};
static const char *const row_keys[] = {"id", "event_type", "published_at", "stream_seq", NULL};

struct tally {
    long long rows, published, duplicate, failed, invalid;
};

static void
count_result(struct tally *t, json_t *r)
{
    const char *o = obx_ctl_str(r, "outcome");

    t->rows++;
    t->published += strcmp(o, "published") == 0;
    t->duplicate += strcmp(o, "duplicate") == 0;
    t->failed += strcmp(o, "failed") == 0;
    t->invalid += strcmp(o, "invalid") == 0;
}

static void
print_summary(int json, const struct tally *t, int dry_run)
{
    json_t *s = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:b}", "action", "replay", "rows",
                          (json_int_t)t->rows, "published", (json_int_t)t->published, "duplicate",
                          (json_int_t)t->duplicate, "failed", (json_int_t)t->failed, "invalid",
                          (json_int_t)t->invalid, "dry_run", dry_run);

    if (json) {
        obx_ctl_emit(1, "summary", s, NULL);
    } else if (dry_run) {
        printf("would replay %lld retained row%s (dry run: nothing published)\n", t->rows,
               t->rows == 1 ? "" : "s");
    } else {
        printf("replayed %lld retained row%s: %lld stored again, %lld already in the stream, "
               "%lld failed, %lld invalid\n",
               t->rows, t->rows == 1 ? "" : "s", t->published, t->duplicate, t->failed, t->invalid);
    }
    json_decref(s);
}

struct replay {
    const struct obx_config *cfg;
    struct obx_ctl_args *args;
    PGconn *conn;
    struct obx_ctl_publisher *pub;
    const char *params[OBX_CTL_FILTER_COUNT + 2];
    char cursor[40], page[24];
    struct tally t;
    outbox_error err;
};

/* One page: listed (dry run) or published. Returns the rows it had; -1 on failure. */
static long long
replay_page(struct replay *r, long long want)
{
    struct obx_ctl_stmt stmt = {obx_sql_replay_rows, r->params, OBX_CTL_FILTER_COUNT + 2};
    json_t *rows = json_array(), *row;
    size_t count = 0, i;
    outbox_status st;

    snprintf(r->page, sizeof(r->page), "%lld", want < PAGE_ROWS ? want : PAGE_ROWS);
    r->params[OBX_CTL_FILTER_COUNT] = r->cursor[0] ? r->cursor : NULL;
    r->params[OBX_CTL_FILTER_COUNT + 1] = r->page;
    if (r->args->dry_run) {
        json_decref(rows);
        st = obx_ctl_query(r->conn, r->cfg->schema, &stmt, &rows, &r->err);
        count = st == OUTBOX_OK ? json_array_size(rows) : 0;
    } else {
        st = obx_ctl_republish(r->pub, r->conn, &stmt, rows, &r->err);
        count = json_array_size(rows);
        if (st == OUTBOX_OK) {
            st = obx_ctl_record_seqs(r->conn, r->cfg->schema, rows, &r->err);
        }
    }
    json_array_foreach(rows, i, row)
    {
        if (r->args->dry_run) {
            r->t.rows++;
        } else {
            count_result(&r->t, row);
        }
        obx_ctl_emit(r->args->json, r->args->dry_run ? "would_replay" : "replayed", row,
                     r->args->dry_run ? row_keys : result_keys);
        snprintf(r->cursor, sizeof(r->cursor), "%s", obx_ctl_str(row, "id"));
    }
    json_decref(rows);
    return st == OUTBOX_OK ? (long long)count : -1;
}

int
obx_ctl_replay(const struct obx_config *cfg, int argc, char **argv)
{
    struct obx_ctl_args args;
    struct replay r = {.cfg = cfg, .args = &args};
    long long left, got;
    int code = obx_ctl_args_parse("replay",
                                  OBX_CTL_OPT_JSON | OBX_CTL_OPT_DRY_RUN | OBX_CTL_OPT_ROUTE |
                                      OBX_CTL_OPT_TIME | OBX_CTL_OPT_IDS | OBX_CTL_OPT_LIMIT,
                                  0, 0, argc, argv, &args);

    if (code == 0) {
        code = obx_ctl_connect(cfg, &r.conn);
    }
    if (code == 0 && !args.dry_run && obx_ctl_publisher_open(cfg, &r.pub, &r.err) != OUTBOX_OK) {
        code = obx_ctl_fail("replay", &r.err);
    }
    if (code == 0) {
        obx_ctl_filter_params(&args, r.params);
        left = args.limit[0] ? strtoll(args.limit, NULL, 10) : -1;
        do {
            got = replay_page(&r, left < 0 ? PAGE_ROWS : left);
            left -= left < 0 ? 0 : got;
        } while (got == PAGE_ROWS && left != 0);
        if (got < 0) {
            code = obx_ctl_fail("replay", &r.err);
        }
        print_summary(args.json, &r.t, args.dry_run);
        if (code == 0 && r.t.failed + r.t.invalid > 0) {
            fprintf(stderr,
                    "outboxctl replay: %lld row%s not published: run it again (failed) "
                    "or see outboxctl validate (invalid)\n",
                    r.t.failed + r.t.invalid, r.t.failed + r.t.invalid == 1 ? "" : "s");
            code = 1;
        }
    }
    obx_ctl_publisher_close(r.pub);
    obx_ctl_close(r.conn);
    obx_ctl_args_fini(&args);
    return code;
}
