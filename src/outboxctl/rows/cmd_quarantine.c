/* SPDX-License-Identifier: MIT */
/*
 * cmd_quarantine.c - `outboxctl quarantine list|release|purge|skip [filters]`:
 * the rows the relay quarantined (status invalid, the reason in
 * last_error), which no other verb shows one by one.
 *
 * list prints each with its reason (exit 1 when there are any: they wait
 * for an operator). release checks each chosen row again with the relay's
 * own code (relay_check.h) and makes the ones that now pass pending and
 * due; the others keep their status and their reason is printed again
 * (exit 1). A row is repaired by an UPDATE of its envelope, which the
 * table's row trigger checks, then released (docs/operations.md: Quarantined rows).
 * purge deletes the chosen rows for good, except an ordered event not yet
 * skipped: it is refused and kept (exit 1), the others purged. skip records each chosen row
 * that is an ordered event as a gap of its aggregate (quarantine_skip.sql),
 * as `dead skip` does for a dead letter, so the events waiting behind a
 * quarantined head go on; the row stays quarantined and is never released.
 * release, purge and skip take a filter or --all, and --dry-run, which
 * runs their statement and rolls it back.
 *
 * The rows are read a page at a time in id order; each page's change is
 * one statement keyed by the ids and the digest of each envelope as it was
 * read, so a row repaired, released or purged by someone else meanwhile
 * is left alone and reported as skipped (exit 1: run it again).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/error.h"
#include "outboxctl/cli.h"
#include "outboxctl/ctl.h"
#include "outboxctl/out.h"
#include "outboxctl/query.h"
#include "relay_check.h"
#include "sql_gen.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { PAGE_ROWS = 500 };

/* Parameters of quarantine_rows.sql past the filters. */
enum { PARAM_CURSOR = OBX_CTL_FILTER_COUNT, PARAM_PAGE, PARAM_ENVELOPE, PARAM_COUNT };

static const char *const row_keys[] = {"id",     "aggregate_type", "event_type", "created_at",
                                       "reason", "skipped",        NULL};
static const char *const refuse_keys[] = {
    "id", "aggregate_type", "aggregate_id", "aggregate_seq", "reason", NULL};
static const char *const skip_keys[] = {
    "id", "aggregate_type", "aggregate_id", "aggregate_seq", "woken", "reason", NULL};

struct quarantine_run {
    const struct obx_config *cfg;
    struct obx_ctl_args *args;
    char verb[24]; /* "quarantine list" ... */
    PGconn *conn;
    const char *params[PARAM_COUNT];
    size_t max_body;
    long long done, still_invalid, skipped, refused;
    outbox_error err;
};

/* Prints `row` as `kind`, without the columns only this verb uses. */
static void
emit(struct quarantine_run *r, const char *kind, json_t *row)
{
    json_object_del(row, "digest");
    json_object_del(row, "envelope");
    obx_ctl_emit(r->args->json, kind, row, row_keys);
}

/*
 * Runs `tmpl` ($1 the ids, $2 their digests) on the rows of `rows` (with
 * `checked`, only those the relay's check passed: no "reason"), committed
 * or, for a dry run, rolled back; `*changed` gets the rows it returned,
 * keyed by their ids.
 */
static outbox_status
change_rows(struct quarantine_run *r, const char *tmpl, json_t *rows, int checked, json_t **changed)
{
    struct obx_buf ids, digests;
    json_t *row, *got = NULL;
    size_t i, n = 0;
    outbox_status st = OUTBOX_OK;

    *changed = json_object();
    obx_buf_init(&ids);
    obx_buf_init(&digests);
    json_array_foreach(rows, i, row)
    {
        if (!checked || json_object_get(row, "reason") == NULL) {
            obx_buf_appendf(&ids, "%s%s", n ? "," : "{", obx_ctl_str(row, "id"));
            obx_buf_appendf(&digests, "%s\"%s\"", n++ ? "," : "{", obx_ctl_str(row, "digest"));
        }
    }
    obx_buf_append_str(&ids, "}");
    obx_buf_append_str(&digests, "}");
    if (obx_buf_failed(&ids) || obx_buf_failed(&digests)) {
        st = obx_fail(&r->err, OUTBOX_ENOMEM, "out of memory");
    } else if (n > 0) {
        const char *params[] = {ids.data, digests.data};
        struct obx_ctl_stmt stmt = {tmpl, params, 2};

        st = obx_ctl_exec(r->conn, "BEGIN", &r->err);
        if (st == OUTBOX_OK) {
            st = obx_ctl_query(r->conn, r->cfg->schema, &stmt, &got, &r->err);
        }
        if (st == OUTBOX_OK && !r->args->dry_run) {
            st = obx_ctl_exec(r->conn, "COMMIT", &r->err);
        } else {
            obx_ctl_exec(r->conn, "ROLLBACK", NULL);
        }
    }
    json_array_foreach(got, i, row)
    {
        json_object_set(*changed, obx_ctl_str(row, "id"), row);
    }
    json_decref(got);
    obx_buf_fini(&digests);
    obx_buf_fini(&ids);
    return st;
}

/* Prints the rows change_rows() changed as `kind`, the others it was given as skipped. */
static void
report_changed(struct quarantine_run *r, json_t *rows, int checked, json_t *changed,
               const char *kind)
{
    json_t *row;
    size_t i;

    json_array_foreach(rows, i, row)
    {
        if (checked && json_object_get(row, "reason") != NULL) {
            continue; /* still invalid: printed by release_page */
        }
        if (json_object_get(changed, obx_ctl_str(row, "id")) != NULL) {
            emit(r, kind, row);
            r->done++;
        } else {
            json_object_set_new(row, "reason",
                                json_string("changed, released or purged by someone else while "
                                            "this ran: run it again"));
            emit(r, "skipped", row);
            r->skipped++;
        }
    }
}

static outbox_status
list_page(struct quarantine_run *r, json_t *rows)
{
    json_t *row;
    size_t i;

    json_array_foreach(rows, i, row)
    {
        emit(r, "quarantined", row);
        r->done++;
    }
    return OUTBOX_OK;
}

static outbox_status
release_page(struct quarantine_run *r, json_t *rows)
{
    json_t *changed = NULL, *row;
    size_t i;
    outbox_status st;

    json_array_foreach(rows, i, row)
    {
        if (json_is_true(json_object_get(row, "skipped"))) {
            json_object_set_new(row, "reason",
                                json_string("skipped as a gap of its ordered aggregate (quarantine "
                                            "skip): the events behind it went out first, so it is "
                                            "never published; purge it"));
        }
    }
    st = change_rows(r, obx_sql_quarantine_release, rows, 1, &changed);

    if (st == OUTBOX_OK) {
        json_array_foreach(rows, i, row)
        {
            if (json_object_get(row, "reason") != NULL) {
                emit(r, "still_invalid", row);
                r->still_invalid++;
            }
        }
        report_changed(r, rows, 1, changed, r->args->dry_run ? "would_release" : "released");
    }
    json_decref(changed);
    return st;
}

/*
 * Deletes the rows, but keeps an ordered event not yet skipped
 * (quarantine_purge.sql refuses it): consumers wait for its number, and
 * once the row is gone no verb could skip it. The others in the same
 * selection are purged; the refused are each printed with the verb that
 * lets them go (exit 1), as release prints the rows it keeps.
 */
static outbox_status
purge_page(struct quarantine_run *r, json_t *rows)
{
    json_t *changed = NULL, *row;
    size_t i;
    outbox_status st = change_rows(r, obx_sql_quarantine_purge, rows, 0, &changed);

    json_array_foreach(st == OUTBOX_OK ? rows : NULL, i, row)
    {
        const char *id = obx_ctl_str(row, "id");
        json_t *got = json_object_get(changed, id);
        char reason[320];

        if (got == NULL) {
            json_object_set_new(row, "reason",
                                json_string("changed, released or purged by someone else while "
                                            "this ran: run it again"));
            emit(r, "skipped", row);
            r->skipped++;
        } else if (json_is_true(json_object_get(got, "purged"))) {
            emit(r, r->args->dry_run ? "would_purge" : "purged", row);
            r->done++;
        } else {
            snprintf(reason, sizeof(reason),
                     "event %s is number %lld of an ordered aggregate and not skipped: consumers "
                     "wait for it, so purging it would hold the events behind it for good; run "
                     "`outboxctl quarantine skip --id %s` first, then purge it",
                     id, (long long)json_integer_value(json_object_get(got, "aggregate_seq")), id);
            json_object_set(row, "aggregate_seq", json_object_get(got, "aggregate_seq"));
            json_object_set_new(row, "reason", json_string(reason));
            json_object_del(row, "digest");
            json_object_del(row, "envelope");
            obx_ctl_emit(r->args->json, "not_purged", row, refuse_keys);
            r->refused++;
        }
    }
    json_decref(changed);
    return st;
}

/*
 * Records the rows as gaps of their ordered aggregates. A row without a
 * number is reported and left as it is; one changed meanwhile, skipped.
 */
static outbox_status
skip_page(struct quarantine_run *r, json_t *rows)
{
    json_t *changed = NULL, *row;
    size_t i;
    outbox_status st = change_rows(r, obx_sql_quarantine_skip, rows, 0, &changed);

    json_array_foreach(st == OUTBOX_OK ? rows : NULL, i, row)
    {
        json_t *got = json_object_get(changed, obx_ctl_str(row, "id"));
        int ok = json_is_true(json_object_get(got, "skipped"));

        json_object_del(row, "digest");
        json_object_del(row, "envelope");
        json_object_del(row, "skipped");
        if (got == NULL) {
            json_object_set_new(row, "reason",
                                json_string("changed, released or purged by someone else while "
                                            "this ran: run it again"));
            obx_ctl_emit(r->args->json, "not_skipped", row, skip_keys);
            r->skipped++;
            continue;
        }
        json_object_set(row, "aggregate_seq", json_object_get(got, "aggregate_seq"));
        json_object_set(row, "woken", json_object_get(got, "woken"));
        json_object_set(row, "reason", json_object_get(got, "reason"));
        r->done += ok;
        obx_ctl_emit(r->args->json,
                     r->args->dry_run ? (ok ? "would_skip" : "would_not_skip")
                     : ok             ? "skipped"
                                      : "not_skipped",
                     row, skip_keys);
    }
    json_decref(changed);
    return st;
}

/* Reads the chosen rows a page at a time (checked by the relay's code for release). */
static outbox_status
walk(struct quarantine_run *r, outbox_status (*each)(struct quarantine_run *, json_t *))
{
    struct obx_ctl_stmt stmt = {obx_sql_quarantine_rows, r->params, PARAM_COUNT};
    int release = each == release_page;
    long long left = r->args->limit[0] ? strtoll(r->args->limit, NULL, 10) : -1;
    char cursor[40] = "", page[24];
    outbox_status st;
    size_t got;

    obx_ctl_filter_params(r->args, r->params);
    r->params[PARAM_ENVELOPE] = release ? "true" : "false";
    do {
        json_t *rows = NULL;

        snprintf(page, sizeof(page), "%lld", left < 0 || left > PAGE_ROWS ? PAGE_ROWS : left);
        r->params[PARAM_CURSOR] = cursor[0] ? cursor : NULL;
        r->params[PARAM_PAGE] = page;
        st = release ? obx_ctl_relay_check(r->conn, r->cfg, &stmt, r->max_body, &rows, &r->err)
                     : obx_ctl_query(r->conn, r->cfg->schema, &stmt, &rows, &r->err);
        got = st == OUTBOX_OK ? json_array_size(rows) : 0;
        if (got > 0) {
            snprintf(cursor, sizeof(cursor), "%s",
                     obx_ctl_str(json_array_get(rows, got - 1), "id"));
            st = each(r, rows);
        }
        json_decref(rows);
        left -= left < 0 ? 0 : (long long)got;
    } while (st == OUTBOX_OK && got == PAGE_ROWS && left != 0);
    return st;
}

static void
summary(struct quarantine_run *r, const char *action, const char *text)
{
    json_t *s = json_pack("{s:s, s:I, s:I, s:I, s:b}", "action", action, "count",
                          (json_int_t)r->done, "still_invalid", (json_int_t)r->still_invalid,
                          "skipped", (json_int_t)r->skipped, "dry_run", r->args->dry_run);

    if (strcmp(action, "purge") == 0) {
        json_object_set_new(s, "refused", json_integer(r->refused));
    }

    if (r->args->json) {
        obx_ctl_emit(1, "summary", s, NULL);
    } else {
        printf("%s %lld quarantined row%s", text, r->done, r->done == 1 ? "" : "s");
        if (r->still_invalid > 0) {
            printf(", %lld still invalid (repair the envelope, see the operations runbook)",
                   r->still_invalid);
        }
        if (r->skipped > 0) {
            printf(", %lld skipped (changed meanwhile: run it again)", r->skipped);
        }
        if (r->refused > 0) {
            printf(", %lld refused (ordered events not skipped: `outboxctl quarantine skip --id "
                   "ID` first)",
                   r->refused);
        }
        if (strcmp(action, "list") == 0 && r->done > 0) {
            printf(" (repair a row's envelope, then `outboxctl quarantine release --id ID`; "
                   "or purge them; or, for an ordered aggregate's head, `quarantine skip --id "
                   "ID`)");
        }
        printf("%s\n", r->args->dry_run ? " (dry run: nothing changed)" : "");
    }
    json_decref(s);
}

/* Checks the subcommand and its options; 0 or 2. */
static int
check_usage(const char *sub, struct quarantine_run *r)
{
    if (strcmp(sub, "list") != 0 && strcmp(sub, "release") != 0 && strcmp(sub, "purge") != 0 &&
        strcmp(sub, "skip") != 0) {
        fprintf(stderr, "outboxctl quarantine: \"%.40s\" is not list, release, purge or skip\n",
                sub);
        return 2;
    }
    snprintf(r->verb, sizeof(r->verb), "quarantine %s", sub);
    if (strcmp(sub, "list") == 0) {
        if (r->args->dry_run || r->args->all) {
            fprintf(stderr, "outboxctl quarantine list: --%s is for release, purge and skip\n",
                    r->args->dry_run ? "dry-run" : "all");
            return 2;
        }
        return 0;
    }
    return obx_ctl_args_require_scope(r->verb, "quarantined row", r->args);
}

int
obx_ctl_quarantine(const struct obx_config *cfg, int argc, char **argv)
{
    struct obx_ctl_args args;
    struct quarantine_run r = {.cfg = cfg, .args = &args};
    const char *sub;
    outbox_status st;
    int code = obx_ctl_args_parse("quarantine",
                                  OBX_CTL_OPT_JSON | OBX_CTL_OPT_DRY_RUN | OBX_CTL_OPT_ALL |
                                      OBX_CTL_OPT_ROUTE | OBX_CTL_OPT_TIME | OBX_CTL_OPT_REASON |
                                      OBX_CTL_OPT_IDS | OBX_CTL_OPT_LIMIT,
                                  1, 1, argc, argv, &args);

    sub = args.positional[0];
    if (code == 0) {
        code = check_usage(sub, &r);
    }
    if (code == 0) {
        code = obx_ctl_connect(cfg, &r.conn);
    }
    if (code == 0) {
        if (sub[0] == 'r') {
            r.max_body = obx_ctl_body_limit(cfg, r.verb);
        }
        st = walk(&r, sub[0] == 'l'   ? list_page
                      : sub[0] == 'r' ? release_page
                      : sub[0] == 's' ? skip_page
                                      : purge_page);
        if (st != OUTBOX_OK) {
            code = obx_ctl_fail(r.verb, &r.err);
        } else {
            summary(&r, sub,
                    sub[0] == 'l'   ? "listed"
                    : sub[0] == 'r' ? (args.dry_run ? "would release" : "released")
                    : sub[0] == 's' ? (args.dry_run ? "would skip" : "skipped")
                                    : (args.dry_run ? "would purge" : "purged"));
            code = (sub[0] == 'l' && r.done > 0) || r.still_invalid > 0 || r.skipped > 0 ||
                           r.refused > 0
                       ? 1
                       : 0;
        }
    }
    obx_ctl_close(r.conn);
    obx_ctl_args_fini(&args);
    return code;
}
