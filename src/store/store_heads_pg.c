/* SPDX-License-Identifier: MIT */
/*
 * store_heads_pg.c - wakes the rows that waited for the heads a batch
 * published (wake_successors.sql, migration 0016), leasing the runs that
 * follow them to the relay that published them.
 *
 * An ordered aggregate's rows go out from its head only; a row whose
 * predecessor was still on its way when it was claimed waits in the row
 * lease. Leasing it right after the publish, as the same relay's next
 * batch, keeps a busy aggregate moving at a batch per round of the relay
 * instead of a batch per row-lease turn, with one write per row where
 * waking it and leasing it took two.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "common/buf.h"
#include "common/error.h"
#include "store_int.h"
#include "support/log.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* One element of a text[] literal, quoted, with \ and " escaped. */
static void
append_text_element(struct obx_buf *b, const char *text)
{
    obx_buf_append_str(b, "\"");
    for (const char *c = text; *c != '\0'; c++) {
        if (*c == '\\' || *c == '"') {
            obx_buf_append_str(b, "\\");
        }
        obx_buf_append(b, c, 1);
    }
    obx_buf_append_str(b, "\"");
}

/* Appends the published ordered rows of `lease` to the three arrays; returns how many. */
static size_t
published_heads(const struct obx_lease *lease, const enum obx_row_outcome *outcomes,
                const unsigned char *held, struct obx_buf out[3])
{
    int seq_col = PQfnumber(lease->rows, "aggregate_seq");
    int type_col = PQfnumber(lease->rows, "aggregate_type");
    int id_col = PQfnumber(lease->rows, "aggregate_id");
    size_t n = 0;

    if (seq_col < 0 || type_col < 0 || id_col < 0) {
        return 0;
    }
    for (size_t i = 0; i < lease->count; i++) {
        if (outcomes[i] != OBX_ROW_DONE || (held != NULL && held[i]) ||
            PQgetisnull(lease->rows, (int)i, seq_col)) {
            continue;
        }
        for (int k = 0; k < 3; k++) {
            obx_buf_append_str(&out[k], n > 0 ? "," : "{");
        }
        append_text_element(&out[0], PQgetvalue(lease->rows, (int)i, type_col));
        obx_buf_append_str(&out[1], PQgetvalue(lease->rows, (int)i, id_col));
        obx_buf_append_str(&out[2], PQgetvalue(lease->rows, (int)i, seq_col));
        n++;
    }
    for (int k = 0; n > 0 && k < 3; k++) {
        obx_buf_append_str(&out[k], "}");
    }
    return n;
}

/* Keeps the rows `res` leased (its first `leased` rows) for the next lease. */
static void
keep_woken(struct obx_store *store, PGresult *res, int leased)
{
    if (leased == 0) {
        PQclear(res);
        return;
    }
    obx_store_release_woken(store); /* none: a lease takes them before the next finish */
    store->woken = res;
}

void
obx_store_wake_successors(struct obx_store *store, const struct obx_lease *lease,
                          const enum obx_row_outcome *outcomes, const unsigned char *held)
{
    struct obx_buf arrays[3];
    const char *params[7];
    char limit_text[16], seconds_text[16], expiries_text[16];
    PGresult *res;
    int rows, leased = 0, leased_col;

    for (int k = 0; k < 3; k++) {
        obx_buf_init(&arrays[k]);
    }
    if (published_heads(lease, outcomes, held, arrays) == 0) {
        goto done;
    }
    if (obx_buf_failed(&arrays[0]) || obx_buf_failed(&arrays[1]) || obx_buf_failed(&arrays[2])) {
        obx_log(OUTBOX_LOG_WARN, "wake the rows waiting for their head: out of memory "
                                 "(they are looked at again after a while)");
        goto done;
    }
    for (int k = 0; k < 3; k++) {
        params[k] = arrays[k].data;
    }
    snprintf(limit_text, sizeof(limit_text), "%d", store->lease_limit > 0 ? store->lease_limit : 1);
    snprintf(seconds_text, sizeof(seconds_text), "%d",
             store->lease_seconds > 0 ? store->lease_seconds : 60);
    snprintf(expiries_text, sizeof(expiries_text), "%d",
             store->max_lease_expiries > 0 ? store->max_lease_expiries : 1);
    params[3] = limit_text;
    params[4] = seconds_text;
    params[5] = expiries_text;
    params[6] = "true"; /* leased to this relay: it publishes the runs next */
    res = obx_pg_session_exec(&store->pg, OBX_STORE_WAKE_SUCCESSORS, params, 7);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        /* Not fatal: a waiting row is looked at again by head_wait_until() in any case. */
        obx_log(OUTBOX_LOG_WARN, "wake the rows waiting for their head: %s",
                PQresultErrorMessage(res));
        PQclear(res);
        goto done;
    }
    rows = PQntuples(res);
    leased_col = PQfnumber(res, "leased");
    while (leased < rows && leased_col >= 0 &&
           strcmp(PQgetvalue(res, leased, leased_col), "t") == 0) {
        leased++;
    }
    if (rows > leased) {
        store->retries_due = 1;
        store->row_lease_due_ms = 0; /* the woken rows go before the next window */
    }
    keep_woken(store, res, leased);
done:
    for (int k = 0; k < 3; k++) {
        obx_buf_fini(&arrays[k]);
    }
}

int
obx_store_take_woken(struct obx_store *store, int limit, struct obx_lease *out)
{
    PGresult *res = store->woken;
    int leased_col, count = 0;

    if (res == NULL) {
        return 0;
    }
    leased_col = PQfnumber(res, "leased");
    while (count < PQntuples(res) && strcmp(PQgetvalue(res, count, leased_col), "t") == 0) {
        count++;
    }
    if (count > limit) {
        obx_store_release_woken(store); /* a smaller batch is asked for: due, for the row lease */
        return 0;
    }
    store->woken = NULL;
    out->rows = res;
    out->count = (size_t)count;
    snprintf(out->token, sizeof(out->token), "%s",
             PQgetvalue(res, 0, PQfnumber(res, "lease_token")));
    return 1;
}

void
obx_store_release_woken(struct obx_store *store)
{
    struct obx_buf ids, outcomes;
    PGresult *res = store->woken;
    int leased_col;

    if (res == NULL) {
        return;
    }
    store->woken = NULL;
    obx_buf_init(&ids);
    obx_buf_init(&outcomes);
    leased_col = PQfnumber(res, "leased");
    for (int i = 0; i < PQntuples(res) && strcmp(PQgetvalue(res, i, leased_col), "t") == 0; i++) {
        obx_buf_appendf(&ids, "%s%s", i ? "," : "{", PQgetvalue(res, i, PQfnumber(res, "id")));
        obx_buf_append_str(&outcomes, i ? ",release" : "{release");
    }
    obx_buf_append_str(&ids, "}");
    obx_buf_append_str(&outcomes, "}");
    if (!obx_buf_failed(&ids) && !obx_buf_failed(&outcomes) && store->pg.conn != NULL) {
        /* finish_rows.sql's release, due now: the row lease checks their head again. */
        const char *params[] = {PQgetvalue(res, 0, PQfnumber(res, "lease_token")),
                                ids.data,
                                outcomes.data,
                                NULL,
                                "f",
                                "1",
                                "0",
                                "0",
                                "0",
                                NULL,
                                NULL};
        PGresult *done = obx_pg_session_exec(&store->pg, OBX_STORE_FINISH_ROWS, params, 11);

        if (PQresultStatus(done) != PGRES_TUPLES_OK) {
            obx_log(OUTBOX_LOG_WARN,
                    "give back the rows leased after their head's publish: %s (their lease "
                    "runs out, and the row lease takes them then)",
                    PQresultErrorMessage(done));
        }
        PQclear(done);
    }
    obx_buf_fini(&outcomes);
    obx_buf_fini(&ids);
    PQclear(res);
}

/* 1 if rows `a` and `b` of the lease are of one aggregate. */
static int
same_aggregate(const struct obx_lease *lease, int type_col, int id_col, size_t a, size_t b)
{
    return strcmp(PQgetvalue(lease->rows, (int)a, type_col),
                  PQgetvalue(lease->rows, (int)b, type_col)) == 0 &&
           strcmp(PQgetvalue(lease->rows, (int)a, id_col),
                  PQgetvalue(lease->rows, (int)b, id_col)) == 0;
}

unsigned char *
obx_store_held_rows(const struct obx_lease *lease, const enum obx_row_outcome *outcomes)
{
    int seq_col = PQfnumber(lease->rows, "aggregate_seq");
    int type_col = PQfnumber(lease->rows, "aggregate_type");
    int id_col = PQfnumber(lease->rows, "aggregate_id");
    unsigned char *held = NULL;

    if (seq_col < 0 || type_col < 0 || id_col < 0) {
        return NULL;
    }
    for (size_t i = 0; i < lease->count; i++) {
        long long seq;

        if (outcomes[i] != OBX_ROW_DONE || PQgetisnull(lease->rows, (int)i, seq_col)) {
            continue;
        }
        seq = strtoll(PQgetvalue(lease->rows, (int)i, seq_col), NULL, 10);
        for (size_t j = 0; j < lease->count; j++) {
            if (j == i || outcomes[j] == OBX_ROW_DONE ||
                PQgetisnull(lease->rows, (int)j, seq_col) ||
                strtoll(PQgetvalue(lease->rows, (int)j, seq_col), NULL, 10) >= seq ||
                !same_aggregate(lease, type_col, id_col, i, j)) {
                continue;
            }
            if (held == NULL && (held = calloc(lease->count, 1)) == NULL) {
                return NULL;
            }
            held[i] = 1;
            break;
        }
    }
    return held;
}
