/* SPDX-License-Identifier: MIT */
/*
 * store_pg.c - lease, finish and prune: the relay's statements on the
 * outbox table (see store.h; the connection lives in store_conn_pg.c).
 *
 * Each call is one statement in its own implicit transaction, so a lease
 * is committed before anything is published and no row lock outlives a
 * call. Values are $n parameters; arrays travel as text literals.
 */
#include "store.h"

#include <assert.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/error_pg.h"
#include "common/text.h"
#include "store_int.h"
#include "support/log.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* A reason longer than this is cut: last_error is for people, not archives. */
#define REASON_MAX_BYTES 1024

/* Column order of lease_batch.sql. */
enum {
    LEASE_ID,
    LEASE_ENVELOPE,
    LEASE_ATTEMPTS,
    LEASE_TOKEN,
    LEASE_QUARANTINED,
    LEASE_EXPIRIES,
    LEASE_TAKEN_OVER
};

/* Per-row release delays beyond this are cut: ten years is "never" in practice, and
 * a larger one would overflow the interval and fail the whole batch's finish. */
#define RELEASE_DELAY_MAX_MS 315360000000LL

/* Leased rows come first; the quarantined ones after them are only logged. */
static void
lease_take(struct obx_lease *out, PGresult *res)
{
    int rows = PQntuples(res);
    int count = 0;

    while (count < rows && strcmp(PQgetvalue(res, count, LEASE_QUARANTINED), "f") == 0) {
        count++;
    }
    for (int i = count; i < rows; i++) {
        obx_log(OUTBOX_LOG_WARN,
                "event quarantined after repeated lease expiries event_id=%s "
                "reason=lease_expired_without_outcome",
                PQgetvalue(res, i, LEASE_ID));
    }
    for (int i = 0; i < rows; i++) {
        out->taken_over += strcmp(PQgetvalue(res, i, LEASE_TAKEN_OVER), "t") == 0;
    }
    out->rows = res;
    out->count = (size_t)count;
    out->quarantined = rows - count;
    if (count > 0) {
        snprintf(out->token, sizeof(out->token), "%s", PQgetvalue(res, 0, LEASE_TOKEN));
    }
}

/* The row lease (lease_batch.sql) of the rows that came back. */
static outbox_status
lease_rows(struct obx_store *store, enum obx_store_sql which, int limit, int lease_seconds,
           int max_lease_expiries, struct obx_lease *out, outbox_error *err)
{
    char limit_text[16], lease_text[16], expiries_text[16];
    const char *params[] = {limit_text, lease_text, expiries_text};
    PGresult *res;
    outbox_status status;

    snprintf(limit_text, sizeof(limit_text), "%d", limit);
    snprintf(lease_text, sizeof(lease_text), "%d", lease_seconds);
    snprintf(expiries_text, sizeof(expiries_text), "%d", max_lease_expiries);
    res = obx_pg_session_exec(&store->pg, which, params, 3);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        status = obx_fail_pg(err, store->pg.conn, res, "lease a batch");
        PQclear(res);
        return status;
    }
    lease_take(out, res);
    return OUTBOX_OK;
}

/* A retry waits at most this long behind a window that is never empty. */
#define ROW_LEASE_TURN_MS 1000

outbox_status
obx_store_lease(struct obx_store *store, int limit, int lease_seconds, int max_lease_expiries,
                struct obx_lease *out, outbox_error *err)
{
    outbox_status status;
    PGresult *res = NULL;
    struct obx_claim_takeover found = {0};

    obx_error_reset(err);
    memset(out, 0, sizeof(*out)); /* left empty on failure: obx_lease_fini() is always safe */
    if (limit < 1 || lease_seconds < 1 || max_lease_expiries < 1) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "lease: limit %d, lease_seconds %d and max_lease_expiries %d must be >= 1",
                        limit, lease_seconds, max_lease_expiries);
    }
    store->lease_limit = limit;
    store->lease_seconds = lease_seconds;
    store->max_lease_expiries = max_lease_expiries;
    if (obx_store_take_woken(store, limit, out)) {
        return OUTBOX_OK; /* the heads this relay published last: their runs go next */
    }
    status = obx_pg_session_require(&store->pg, err);
    if (status != OUTBOX_OK || store->row_leases_only) {
        return status != OUTBOX_OK ? status
                                   : lease_rows(store, OBX_STORE_LEASE_ALL, limit, lease_seconds,
                                                max_lease_expiries, out, err);
    }
    if (store->retries_due && obx_monotonic_ms() >= store->row_lease_due_ms) {
        store->row_lease_due_ms = obx_monotonic_ms() + ROW_LEASE_TURN_MS;
        status =
            lease_rows(store, OBX_STORE_LEASE, limit, lease_seconds, max_lease_expiries, out, err);
        if (status != OUTBOX_OK || out->count > 0 || out->quarantined > 0) {
            return status;
        }
        obx_lease_fini(out);
    }
    status = obx_store_claim_window(store, limit, lease_seconds, &res, &found, err);
    if (status != OUTBOX_OK) {
        return status;
    }
    store->retries_due = found.retries_due;
    lease_take(out, res);
    out->taken_over += found.given_back;
    if (out->count > 0 || !found.retries_due) {
        return OUTBOX_OK;
    }
    /* Nothing fresh: the rows that came back, which are due. */
    obx_lease_fini(out);
    store->row_lease_due_ms = obx_monotonic_ms() + ROW_LEASE_TURN_MS;
    status = lease_rows(store, OBX_STORE_LEASE, limit, lease_seconds, max_lease_expiries, out, err);
    out->taken_over += found.given_back;
    return status;
}

void
obx_lease_fini(struct obx_lease *lease)
{
    if (lease == NULL) {
        return;
    }
    PQclear(lease->rows);
    memset(lease, 0, sizeof(*lease));
}

const char *
obx_lease_id(const struct obx_lease *lease, size_t i)
{
    assert(i < lease->count);
    return PQgetvalue(lease->rows, (int)i, LEASE_ID);
}

const char *
obx_lease_envelope(const struct obx_lease *lease, size_t i, size_t *len)
{
    assert(i < lease->count);
    if (len != NULL) {
        *len = (size_t)PQgetlength(lease->rows, (int)i, LEASE_ENVELOPE);
    }
    return PQgetvalue(lease->rows, (int)i, LEASE_ENVELOPE);
}

void
obx_lease_row(const struct obx_lease *lease, size_t i, struct obx_envelope_row *out)
{
    static const struct {
        const char *column;
        unsigned bit;
        size_t offset;
    } fields[] = {
        {"event_type", OBX_ROW_EVENT_TYPE, offsetof(struct obx_envelope_head, event_type)},
        {"aggregate_type", OBX_ROW_AGGREGATE_TYPE,
         offsetof(struct obx_envelope_head, aggregate_type)},
        {"aggregate_id", OBX_ROW_AGGREGATE_ID, offsetof(struct obx_envelope_head, aggregate_id)},
        {"tenant_id", OBX_ROW_TENANT_ID, offsetof(struct obx_envelope_head, tenant_id)},
        {"data_subject", OBX_ROW_DATA_SUBJECT, offsetof(struct obx_envelope_head, data_subject)},
    };

    assert(i < lease->count);
    memset(out, 0, sizeof(*out));
    for (size_t k = 0; k < sizeof(fields) / sizeof(fields[0]); k++) {
        int col = PQfnumber(lease->rows, fields[k].column);
        const char **slot = (const char **)((char *)&out->head + fields[k].offset);

        if (col < 0) {
            continue;
        }
        out->known |= fields[k].bit;
        *slot = PQgetisnull(lease->rows, (int)i, col) ? NULL : PQgetvalue(lease->rows, (int)i, col);
    }
}

int
obx_lease_attempts(const struct obx_lease *lease, size_t i)
{
    assert(i < lease->count);
    return (int)strtol(PQgetvalue(lease->rows, (int)i, LEASE_ATTEMPTS), NULL, 10);
}

int
obx_lease_expiries(const struct obx_lease *lease, size_t i)
{
    assert(i < lease->count);
    return (int)strtol(PQgetvalue(lease->rows, (int)i, LEASE_EXPIRIES), NULL, 10);
}

/* One finish call's input, so the helpers below take one argument for it. */
struct finish_call {
    const struct obx_lease *lease;
    const enum obx_row_outcome *outcomes;
    const unsigned char *held; /* per row: published after an unpublished row of its
                                * aggregate (obx_store_held_rows), or NULL: none */
    const char *const *reasons;
    const struct obx_finish_options *opts;
};

static const char *
outcome_name(enum obx_row_outcome outcome)
{
    switch (outcome) {
    case OBX_ROW_DONE:
        return "done";
    case OBX_ROW_RETRY:
        return "retry";
    case OBX_ROW_RELEASE:
        return "release";
    case OBX_ROW_INVALID:
        return "invalid";
    }
    /* Unreachable with a valid enum; releasing is the one outcome that can do no harm. */
    return "release";
}

/*
 * One element of a text[] literal: quoted, with \ and " escaped. The
 * reason is cut at REASON_MAX_BYTES, control characters become '?', and
 * so does every non-ASCII byte if the text is not valid UTF-8: a broker
 * message in another encoding must not make the server refuse the whole
 * batch's finish. The cut moves back to a character boundary.
 */
static void
append_reason(struct obx_buf *b, const char *reason)
{
    size_t len = strnlen(reason, REASON_MAX_BYTES);
    int utf8;

    while (len > 0 && ((unsigned char)reason[len] & 0xc0) == 0x80) {
        len--; /* reason[len] continues a character: cut before it starts */
    }
    utf8 = obx_utf8_valid(reason, len);

    obx_buf_append(b, "\"", 1);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)reason[i];
        int keep = (c >= 0x20 && c != 0x7f) && (c < 0x80 || utf8);

        if (c == '\\' || c == '"') {
            obx_buf_append(b, "\\", 1);
        }
        obx_buf_append(b, keep ? &reason[i] : "?", 1);
    }
    obx_buf_append(b, "\"", 1);
}

/*
 * A bigint[] literal of `count` values, each clamped to 0..`cap`; with
 * `unknown_as_null`, values below 1 (unknown) are NULL instead.
 */
static void
append_int_array(struct obx_buf *b, const long long *values, size_t count, long long cap,
                 int unknown_as_null)
{
    obx_buf_append_str(b, "{");
    for (size_t i = 0; i < count; i++) {
        long long v = values[i];

        obx_buf_append_str(b, i > 0 ? "," : "");
        if (unknown_as_null && v < 1) {
            obx_buf_append_str(b, "NULL");
        } else {
            obx_buf_appendf(b, "%lld", v < 0 ? 0 : v > cap ? cap : v);
        }
    }
    obx_buf_append_str(b, "}");
}

/*
 * `{a,b,...}` literals of the lease's ids, outcomes and reasons, and of the
 * per-row release delays if there are any (else `delays` stays NULL).
 */
static void
build_arrays(const struct finish_call *call, struct obx_buf *ids, struct obx_buf *outcomes,
             struct obx_buf *reasons, struct obx_buf *delays)
{
    size_t count = call->lease->count;

    obx_buf_append_str(ids, "{");
    obx_buf_append_str(outcomes, "{");
    obx_buf_append_str(reasons, "{");
    for (size_t i = 0; i < count; i++) {
        const char *sep = i + 1 < count ? "," : "";
        const char *reason = call->reasons != NULL ? call->reasons[i] : NULL;

        obx_buf_appendf(ids, "%s%s", obx_lease_id(call->lease, i), sep);
        obx_buf_appendf(
            outcomes, "%s%s",
            call->held != NULL && call->held[i] ? "wait" : outcome_name(call->outcomes[i]), sep);
        if (reason != NULL) {
            append_reason(reasons, reason);
        } else {
            obx_buf_append_str(reasons, "NULL");
        }
        obx_buf_append_str(reasons, sep);
    }
    obx_buf_append_str(ids, "}");
    obx_buf_append_str(outcomes, "}");
    obx_buf_append_str(reasons, "}");
    if (call->opts->release_delays_ms != NULL) {
        append_int_array(delays, call->opts->release_delays_ms, call->lease->count,
                         RELEASE_DELAY_MAX_MS, 0);
    }
}

/* The common case: every row published. A plain DELETE or UPDATE by id. */
static outbox_status
finish_all_done(struct obx_store *store, const struct finish_call *call, const char *ids,
                const char *seqs, struct obx_finish_counts *counts, outbox_error *err)
{
    const char *params[] = {call->lease->token, ids, seqs};
    enum obx_store_sql which =
        call->opts->mode == OBX_FINISH_PRUNE ? OBX_STORE_DONE_PRUNE : OBX_STORE_DONE_MARK;
    PGresult *res =
        obx_pg_session_exec(&store->pg, which, params, which == OBX_STORE_DONE_MARK ? 3 : 2);
    outbox_status status = OUTBOX_OK;

    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        status = obx_fail_pg(err, store->pg.conn, res, "finish a published batch");
    } else {
        memset(counts, 0, sizeof(*counts));
        counts->done = (size_t)strtoul(PQcmdTuples(res), NULL, 10);
    }
    PQclear(res);
    return status;
}

static outbox_status
finish_mixed(struct obx_store *store, const struct finish_call *call, const char *const arrays[5],
             struct obx_finish_counts *counts, outbox_error *err)
{
    const struct obx_finish_options *o = call->opts;
    char max_text[16], delay_text[16], base_text[16], cap_text[16];
    const char *params[] = {call->lease->token,
                            arrays[0],
                            arrays[1],
                            arrays[2],
                            o->mode == OBX_FINISH_PRUNE ? "t" : "f",
                            max_text,
                            delay_text,
                            base_text,
                            cap_text,
                            arrays[3],
                            arrays[4]};
    size_t *fields[] = {&counts->done, &counts->retried, &counts->dead, &counts->released,
                        &counts->invalid};
    PGresult *res;
    outbox_status status = OUTBOX_OK;

    snprintf(max_text, sizeof(max_text), "%d", o->max_attempts);
    snprintf(delay_text, sizeof(delay_text), "%d", o->release_delay_ms);
    snprintf(base_text, sizeof(base_text), "%d", o->backoff_base_ms);
    snprintf(cap_text, sizeof(cap_text), "%d", o->backoff_cap_ms);
    res = obx_pg_session_exec(&store->pg, OBX_STORE_FINISH_ROWS, params, 11);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        status = obx_fail_pg(err, store->pg.conn, res, "finish a batch");
    } else {
        memset(counts, 0, sizeof(*counts));
        for (int i = 0; i < 5; i++) {
            *fields[i] = (size_t)strtoul(PQgetvalue(res, 0, i), NULL, 10);
        }
    }
    PQclear(res);
    return status;
}

static outbox_status
finish_check(const struct finish_call *call, outbox_error *err)
{
    const struct obx_finish_options *o = call->opts;

    if (o->max_attempts < 1 || o->release_delay_ms < 0 || o->backoff_base_ms < 0 ||
        o->backoff_cap_ms < 0) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "finish: max_attempts %d must be >= 1, release_delay_ms %d, "
                        "backoff_base_ms %d and backoff_cap_ms %d >= 0",
                        o->max_attempts, o->release_delay_ms, o->backoff_base_ms,
                        o->backoff_cap_ms);
    }
    if (call->lease->count > 0 && call->outcomes == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "finish: outcomes are required for %zu rows",
                        call->lease->count);
    }
    for (size_t i = 0; i < call->lease->count; i++) {
        if (outcome_name(call->outcomes[i]) == NULL) {
            return obx_fail(err, OUTBOX_EINVAL, "finish: outcome %d of row %zu is unknown",
                            (int)call->outcomes[i], i);
        }
    }
    return OUTBOX_OK;
}

outbox_status
obx_store_finish(struct obx_store *store, const struct obx_lease *lease,
                 const enum obx_row_outcome *outcomes, const char *const *reasons,
                 const struct obx_finish_options *opts, struct obx_finish_counts *counts,
                 outbox_error *err)
{
    struct finish_call call = {lease, outcomes, NULL, reasons, opts};
    struct obx_finish_counts got;
    struct obx_buf ids, names, texts, delays, seqs;
    size_t done_rows = 0, applied;
    outbox_status status;

    obx_error_reset(err);
    status = finish_check(&call, err);
    if (status != OUTBOX_OK || lease->count == 0) {
        memset(counts, 0, status == OUTBOX_OK ? sizeof(*counts) : 0);
        return status;
    }
    status = obx_pg_session_require(&store->pg, err);
    if (status != OUTBOX_OK) {
        return status;
    }
    obx_buf_init(&ids);
    obx_buf_init(&names);
    obx_buf_init(&texts);
    obx_buf_init(&delays);
    obx_buf_init(&seqs);
    call.held = obx_store_held_rows(lease, outcomes);
    build_arrays(&call, &ids, &names, &texts, &delays);
    if (opts->stream_seqs != NULL) {
        append_int_array(&seqs, call.opts->stream_seqs, call.lease->count, LLONG_MAX, 1);
    }
    if (obx_buf_failed(&ids) || obx_buf_failed(&names) || obx_buf_failed(&texts) ||
        obx_buf_failed(&delays) || obx_buf_failed(&seqs)) {
        status = obx_fail(err, OUTBOX_ENOMEM, "finish: out of memory");
        goto done;
    }
    while (done_rows < lease->count && outcomes[done_rows] == OBX_ROW_DONE &&
           (call.held == NULL || !call.held[done_rows])) {
        done_rows++;
    }
    if (done_rows == lease->count) {
        status = finish_all_done(store, &call, ids.data, seqs.data, &got, err);
    } else {
        const char *const arrays[5] = {ids.data, names.data, texts.data, delays.data, seqs.data};

        status = finish_mixed(store, &call, arrays, &got, err);
    }
    if (status == OUTBOX_OK) {
        applied = got.done + got.retried + got.dead + got.released + got.invalid;
        got.lost = applied < lease->count ? lease->count - applied : 0;
        *counts = got;
        if (got.done > 0) {
            obx_store_wake_successors(store, lease, outcomes, call.held);
        }
    }
done:
    free((void *)call.held);
    obx_buf_fini(&seqs);
    obx_buf_fini(&delays);
    obx_buf_fini(&texts);
    obx_buf_fini(&names);
    obx_buf_fini(&ids);
    return status;
}

outbox_status
obx_store_extend(struct obx_store *store, const struct obx_lease *lease, size_t i,
                 int lease_seconds, outbox_error *err)
{
    char seconds_text[16];
    const char *params[3];
    PGresult *res;
    outbox_status status;

    obx_error_reset(err);
    if (i >= lease->count || lease_seconds < 1) {
        return obx_fail(err, OUTBOX_EINVAL, "extend: row %zu of %zu, lease_seconds %d must be >= 1",
                        i, lease->count, lease_seconds);
    }
    status = obx_pg_session_require(&store->pg, err);
    if (status != OUTBOX_OK) {
        return status;
    }
    snprintf(seconds_text, sizeof(seconds_text), "%d", lease_seconds);
    params[0] = lease->token;
    params[1] = obx_lease_id(lease, i);
    params[2] = seconds_text;
    res = obx_pg_session_exec(&store->pg, OBX_STORE_EXTEND, params, 3);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        status = obx_fail_pg(err, store->pg.conn, res, "extend a lease");
    } else if (strcmp(PQgetvalue(res, 0, 0), "0") == 0) {
        status = obx_fail(err, OUTBOX_ECONFLICT, "extend: the lease of event %s ran out",
                          obx_lease_id(lease, i));
    }
    PQclear(res);
    return status;
}

outbox_status
obx_store_prune_done(struct obx_store *store, int retention_seconds, int limit,
                     struct obx_prune_cursor *cursor, size_t *deleted, outbox_error *err)
{
    _Static_assert(sizeof(cursor->after) == OBX_PRUNE_AFTER_CAP, "a pass's place is a uuid's text");
    obx_error_reset(err);
    return obx_pg_session_prune(&store->pg, OBX_STORE_PRUNE, retention_seconds, limit,
                                cursor != NULL ? cursor->after : NULL, "prune done events", deleted,
                                err);
}
