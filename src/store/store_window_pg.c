/* SPDX-License-Identifier: MIT */
/*
 * store_window_pg.c - the window claim (claim_window.sql): fresh rows
 * claimed by commit window with no write to them.
 *
 * The claim is a transaction of four statements and a read, sent in one
 * round trip: lock the schema's cursor row, give back the rows of claims
 * that ran out, claim, commit, then read the claimed rows. The cursor lock
 * puts claims in a queue, and each statement after it takes its snapshot
 * once the lock is held, so every claim starts where the one before it
 * stopped. The rows' envelopes are read and sent after the commit, so the
 * claim that the next relay queues behind chooses ids only: its time under
 * the lock is about half of a claim that returns the rows itself.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "common/error.h"
#include "common/error_pg.h"
#include "common/uuid7.h"
#include "store_int.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { STEP_BEGIN, STEP_CURSOR, STEP_TAKEOVER, STEP_CLAIM, STEP_COMMIT, STEP_ROWS, STEPS };

/* The first step that failed, or -1 when all did what they should. */
static int
failed_step(PGresult *const *res)
{
    static const ExecStatusType expected[STEPS] = {PGRES_COMMAND_OK, PGRES_COMMAND_OK,
                                                   PGRES_TUPLES_OK,  PGRES_TUPLES_OK,
                                                   PGRES_COMMAND_OK, PGRES_TUPLES_OK};

    for (int i = 0; i < STEPS; i++) {
        if (PQresultStatus(res[i]) != expected[i]) {
            return i;
        }
    }
    return -1;
}

/* The server forgot a prepared statement (a pooler's DISCARD ALL) or its plan went stale. */
static int
statement_lost(const outbox_error *err)
{
    return strcmp(err->sqlstate, "26000") == 0 || strcmp(err->sqlstate, "0A000") == 0;
}

static outbox_status claim_once(struct obx_store *store, int limit, int claim_seconds,
                                PGresult **rows, struct obx_claim_takeover *found, int *committed,
                                outbox_error *err);

outbox_status
obx_store_claim_window(struct obx_store *store, int limit, int claim_seconds, PGresult **rows,
                       struct obx_claim_takeover *found, outbox_error *err)
{
    int committed = 0;
    outbox_status status = claim_once(store, limit, claim_seconds, rows, found, &committed, err);

    /* Prepared anew (obx_pg_session_pipeline forgot it), a claim that did not
     * commit runs once more. */
    if (status == OUTBOX_EDB && statement_lost(err) && !committed) {
        obx_error_reset(err);
        status = claim_once(store, limit, claim_seconds, rows, found, &committed, err);
    }
    return status;
}

static outbox_status
claim_once(struct obx_store *store, int limit, int claim_seconds, PGresult **rows,
           struct obx_claim_takeover *found, int *committed, outbox_error *err)
{
    char limit_text[16], seconds_text[16], token[37];
    const char *params[] = {limit_text, seconds_text, store->holder, token};
    const char *token_param[] = {token};
    uint8_t token_bytes[16];
    const struct obx_pg_step steps[STEPS] = {
        [STEP_BEGIN] = {.text = "BEGIN"},
        [STEP_CURSOR] = {.which = OBX_STORE_CLAIM_CURSOR},
        [STEP_TAKEOVER] = {.which = OBX_STORE_CLAIM_TAKEOVER},
        [STEP_CLAIM] = {.which = OBX_STORE_CLAIM_WINDOW, .params = params, .nparams = 4},
        [STEP_COMMIT] = {.text = "COMMIT"},
        [STEP_ROWS] = {.which = OBX_STORE_CLAIM_WINDOW_ROWS, .params = token_param, .nparams = 1},
    };
    PGresult *res[STEPS];
    outbox_status status;
    int failed;

    if (obx_uuid7_generate(token_bytes) != 0) {
        return obx_fail(err, OUTBOX_EUNAVAILABLE,
                        "claim a window batch: no random bytes for its token");
    }
    obx_uuid_format(token_bytes, token);
    snprintf(limit_text, sizeof(limit_text), "%d", limit);
    snprintf(seconds_text, sizeof(seconds_text), "%d", claim_seconds);
    status = obx_pg_session_pipeline(&store->pg, steps, STEPS, res, err);
    failed = status == OUTBOX_OK ? failed_step(res) : -1;
    *committed = status == OUTBOX_OK && (failed == -1 || failed == STEP_ROWS);
    if (failed == STEP_ROWS) {
        /* The claim is committed: its rows are read once more, by a statement
         * prepared anew if the server forgot it or its plan went stale, or
         * they wait for the claim to run out. */
        PQclear(res[STEP_ROWS]);
        res[STEP_ROWS] =
            obx_pg_session_exec(&store->pg, OBX_STORE_CLAIM_WINDOW_ROWS, token_param, 1);
        failed = PQresultStatus(res[STEP_ROWS]) == PGRES_TUPLES_OK ? -1 : STEP_ROWS;
    }
    if (status == OUTBOX_OK && failed >= 0) {
        status = obx_fail_pg(err, store->pg.conn, res[failed], "claim a window batch");
        /* A failed step before the commit leaves the transaction open and
         * aborted: end it, or the session's next statement fails too. A
         * connection that cannot is reported lost by that statement. */
        if (failed < STEP_ROWS) {
            PQclear(PQexec(store->pg.conn, "ROLLBACK"));
        }
    }
    if (status == OUTBOX_OK) {
        found->given_back = (int)strtol(PQgetvalue(res[STEP_TAKEOVER], 0, 0), NULL, 10);
        found->retries_due = strcmp(PQgetvalue(res[STEP_TAKEOVER], 0, 1), "t") == 0;
        *rows = res[STEP_ROWS];
        res[STEP_ROWS] = NULL; /* the caller's now */
    }
    for (int i = 0; i < STEPS; i++) {
        PQclear(res[i]);
    }
    return status;
}
