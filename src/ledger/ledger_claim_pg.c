/* SPDX-License-Identifier: MIT */
/*
 * ledger_claim_pg.c - claim, mark done, record a failure, release: the
 * writes on processed_events (see ledger.h).
 *
 * A batch is one claim call and one done statement. Every write after the
 * claim is guarded by the claim's owner token, so a worker whose claim was
 * taken over changes nothing. Values are $n parameters; id and token
 * arrays travel as text literals of checked UUIDs, which need no quoting.
 */
#include "ledger.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "common/buf.h"
#include "common/error.h"
#include "common/text.h"
#include "common/uuid7.h"
#include "ledger_int.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* A reason longer than this is cut: last_error is for people, not archives. */
#define REASON_MAX_BYTES 1024

/* Column order of ledger_claim.sql. */
enum { CLAIM_EVENT_ID, CLAIM_STATE, CLAIM_ATTEMPTS, CLAIM_DEFER_MS, CLAIM_OWNER_TOKEN };

/* Column order of ledger_record_failure.sql. */
enum { FAILURE_ATTEMPTS, FAILURE_DEAD, FAILURE_RETRY_MS };

/* 8-4-4-4-12 hex digits: the only form the ledger passes on, so arrays need no quoting. */
static int
is_uuid(const char *s)
{
    uint8_t scratch[16];

    return s != NULL && obx_uuid_parse(s, scratch) == 0;
}

int
obx_ledger_handler_name_valid(const char *name)
{
    size_t len = name != NULL ? strlen(name) : 0;

    return len >= 1 && len <= 64 &&
           strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == len;
}

/* The table's own rule (processed_events_handler_name), checked before the server sees it. */
static outbox_status
check_handler(const char *handler, outbox_error *err)
{
    char quoted[160];

    if (obx_ledger_handler_name_valid(handler)) {
        return OUTBOX_OK;
    }
    if (handler == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "handler is required");
    }
    obx_quote_for_message(handler, quoted, sizeof(quoted));
    return obx_fail(err, OUTBOX_EINVAL, "handler %s must be 1 to 64 of [A-Za-z0-9_.-]", quoted);
}

static outbox_status
check_uuid(const char *what, const char *value, outbox_error *err)
{
    char quoted[160];

    if (is_uuid(value)) {
        return OUTBOX_OK;
    }
    if (value == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "%s is required", what);
    }
    obx_quote_for_message(value, quoted, sizeof(quoted));
    return obx_fail(err, OUTBOX_EINVAL, "%s %s is not a UUID (8-4-4-4-12 hex digits)", what,
                    quoted);
}

/* `{a,b,...}` of the events' ids, each checked first. */
static outbox_status
ids_literal(const struct obx_ledger_event *events, size_t count, struct obx_buf *ids,
            outbox_error *err)
{
    obx_buf_append_str(ids, "{");
    for (size_t i = 0; i < count; i++) {
        outbox_status status = check_uuid("event_id", events[i].event_id, err);

        if (status != OUTBOX_OK) {
            return status;
        }
        obx_buf_appendf(ids, "%s%s", events[i].event_id, i + 1 < count ? "," : "");
    }
    obx_buf_append_str(ids, "}");
    if (obx_buf_failed(ids)) {
        return obx_fail(err, OUTBOX_ENOMEM, "claim: out of memory");
    }
    return OUTBOX_OK;
}

static int
state_from_text(const char *text, enum obx_claim_state *state)
{
    static const struct {
        const char *name;
        enum obx_claim_state state;
    } states[] = {
        {"run", OBX_CLAIM_RUN},         {"done", OBX_CLAIM_DONE}, {"busy", OBX_CLAIM_BUSY},
        {"backoff", OBX_CLAIM_BACKOFF}, {"dead", OBX_CLAIM_DEAD}, {"parked", OBX_CLAIM_PARKED},
    };

    for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
        if (strcmp(text, states[i].name) == 0) {
            *state = states[i].state;
            return 1;
        }
    }
    return 0;
}

/* One result row per event, in order; `out` is written only once every row made sense. */
static outbox_status
claims_take(const PGresult *res, size_t count, struct obx_claim *out, outbox_error *err)
{
    enum obx_claim_state state;

    if ((size_t)PQntuples(res) != count) {
        return obx_fail(err, OUTBOX_EDB, "claim: %d results for %zu events", PQntuples(res), count);
    }
    for (size_t i = 0; i < count; i++) {
        if (!state_from_text(PQgetvalue(res, (int)i, CLAIM_STATE), &state)) {
            return obx_fail(err, OUTBOX_EDB, "claim: unknown state \"%.16s\" for event %zu",
                            PQgetvalue(res, (int)i, CLAIM_STATE), i);
        }
    }
    for (size_t i = 0; i < count; i++) {
        struct obx_claim *c = &out[i];

        memset(c, 0, sizeof(*c));
        state_from_text(PQgetvalue(res, (int)i, CLAIM_STATE), &c->state);
        c->attempts = (int)strtol(PQgetvalue(res, (int)i, CLAIM_ATTEMPTS), NULL, 10);
        c->defer_ms = strtoll(PQgetvalue(res, (int)i, CLAIM_DEFER_MS), NULL, 10);
        snprintf(c->owner_token, sizeof(c->owner_token), "%s",
                 PQgetvalue(res, (int)i, CLAIM_OWNER_TOKEN));
    }
    return OUTBOX_OK;
}

/* 1 if any event of the claim was parked. */
static int
claims_parked(const struct obx_claim *claims, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        if (claims[i].state == OBX_CLAIM_PARKED) {
            return 1;
        }
    }
    return 0;
}

static outbox_status
claim_check(const char *handler, int lease_seconds, int lock_wait_ms, outbox_error *err)
{
    if (lease_seconds < 1 || lock_wait_ms < 0) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "claim: lease_seconds %d must be >= 1 and lock_wait_ms %d >= 0",
                        lease_seconds, lock_wait_ms);
    }
    return check_handler(handler, err);
}

/* A claim's statement and parameters, built from its events. */
struct claim_stmt {
    char lease_text[16], wait_text[16];
    const char *params[5 + OBX_ORDER_ARRAYS];
    int nparams;
    size_t which;
    struct obx_buf ids, order[OBX_ORDER_ARRAYS];
};

static void
claim_stmt_init(struct claim_stmt *c)
{
    memset(c, 0, sizeof(*c));
    obx_buf_init(&c->ids);
    for (size_t a = 0; a < OBX_ORDER_ARRAYS; a++) {
        obx_buf_init(&c->order[a]);
    }
}

static void
claim_stmt_fini(struct claim_stmt *c)
{
    for (size_t a = 0; a < OBX_ORDER_ARRAYS; a++) {
        obx_buf_fini(&c->order[a]);
    }
    obx_buf_fini(&c->ids);
}

static outbox_status
claim_build(struct claim_stmt *c, const char *handler, const struct obx_ledger_event *events,
            size_t count, int lease_seconds, int lock_wait_ms, int as_done, int fresh_ok,
            int with_messages, outbox_error *err)
{
    outbox_status status = ids_literal(events, count, &c->ids, err);

    if (status != OUTBOX_OK) {
        return status;
    }
    snprintf(c->lease_text, sizeof(c->lease_text), "%d", lease_seconds);
    snprintf(c->wait_text, sizeof(c->wait_text), "%d", lock_wait_ms);
    c->params[0] = handler;
    c->params[1] = c->ids.data;
    c->params[2] = c->lease_text;
    c->params[3] = c->wait_text;
    c->params[4] = as_done ? "true" : "false";
    if (!obx_ledger_events_ordered(events, count)) {
        /* No ordered event: the plain claim, not a statement more for unordered batches;
         * with `fresh_ok` (the claim ends its transaction, which keeps the lock_timeout it
         * sets), the one that writes the rows of events seen for the first time itself. */
        c->which = fresh_ok && !as_done ? OBX_LEDGER_CLAIM_FRESH : OBX_LEDGER_CLAIM;
        c->nparams = 5;
        return OUTBOX_OK;
    }
    status =
        obx_ledger_order_arrays(events, NULL, OBX_CLAIM_RUN, count, with_messages, c->order, err);
    for (size_t a = 0; status == OUTBOX_OK && a < OBX_ORDER_ARRAYS; a++) {
        c->params[5 + a] = c->order[a].data; /* without the messages: NULL, as the SQL says */
    }
    c->which = OBX_LEDGER_CLAIM_ORDERED;
    c->nparams = 5 + OBX_ORDER_ARRAYS;
    return status;
}

/*
 * The fresh claim's insert waited longer than the lock wait for a row
 * another open transaction is writing (SQLSTATE 55P03): nothing was
 * claimed, and the claim function, which reports such a row busy, is
 * used instead.
 */
static int
fresh_claim_waited(const struct claim_stmt *c, const PGresult *res)
{
    const char *state = res != NULL ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

    return c->which == OBX_LEDGER_CLAIM_FRESH && state != NULL && strcmp(state, "55P03") == 0;
}

/*
 * After an ordered claim, in its transaction: whether it parked events
 * (the next claim carries the messages if so), and the messages of those
 * it parked when it did not carry them.
 */
static outbox_status
parked_messages(struct obx_ledger *ledger, const char *handler,
                const struct obx_ledger_event *events, const struct obx_claim *claims, size_t count,
                int with_messages, outbox_error *err)
{
    ledger->parked_lately = claims_parked(claims, count);
    if (ledger->parked_lately && !with_messages) {
        return obx_ledger_parked_fill(ledger, handler, events, claims, count, err);
    }
    return OUTBOX_OK;
}

static outbox_status
claim(struct obx_ledger *ledger, const char *handler, const struct obx_ledger_event *events,
      size_t count, int lease_seconds, int lock_wait_ms, int as_done, struct obx_claim *out,
      outbox_error *err)
{
    struct claim_stmt c;
    PGresult *res = NULL;
    outbox_status status;
    PGTransactionStatusType txn;
    int with_messages, own_txn;

    obx_error_reset(err);
    status = claim_check(handler, lease_seconds, lock_wait_ms, err);
    if (status != OUTBOX_OK || count == 0) {
        return status;
    }
    status = obx_pg_session_require(&ledger->pg, err);
    if (status != OUTBOX_OK) {
        return status;
    }
    /* An ordered claim carries the events' messages only when the last one parked
     * some: a parked event's message is written in the claim's transaction either way
     * (below), and most batches park nothing; the messages are nearly all of a claim's
     * bytes. */
    txn = PQtransactionStatus(ledger->pg.conn);
    with_messages = ledger->parked_lately;
    claim_stmt_init(&c);
    status = claim_build(&c, handler, events, count, lease_seconds, lock_wait_ms, as_done,
                         txn == PQTRANS_IDLE, with_messages, err);
    /* Outside a transaction, such a claim opens one, so that the events it parks get their
     * messages before anyone can see them; it commits after that. */
    own_txn = status == OUTBOX_OK && txn == PQTRANS_IDLE && c.which == OBX_LEDGER_CLAIM_ORDERED &&
              !with_messages;
    if (status == OUTBOX_OK && own_txn) {
        const struct obx_pg_step steps[2] = {
            {.text = "BEGIN ISOLATION LEVEL READ COMMITTED"},
            {.which = c.which, .params = c.params, .nparams = c.nparams}};
        PGresult *begun[2] = {NULL};

        status = obx_pg_session_pipeline(&ledger->pg, steps, 2, begun, err);
        if (status == OUTBOX_OK) {
            status = obx_pg_session_check(&ledger->pg, begun[0], "claim", err);
        }
        PQclear(begun[0]);
        res = begun[1];
    } else if (status == OUTBOX_OK) {
        res = obx_pg_session_exec(&ledger->pg, c.which, c.params, c.nparams);
        if (fresh_claim_waited(&c, res)) {
            PQclear(res); /* outside a transaction: that statement was rolled back alone */
            c.which = OBX_LEDGER_CLAIM;
            res = obx_pg_session_exec(&ledger->pg, c.which, c.params, c.nparams);
        }
    }
    if (status == OUTBOX_OK) {
        status = obx_pg_session_check(&ledger->pg, res, "claim", err);
    }
    if (status == OUTBOX_OK) {
        status = claims_take(res, count, out, err);
    }
    PQclear(res);
    claim_stmt_fini(&c);
    if (status == OUTBOX_OK && c.which == OBX_LEDGER_CLAIM_ORDERED) {
        status = parked_messages(ledger, handler, events, out, count, with_messages, err);
    }
    if (own_txn) {
        if (status == OUTBOX_OK) {
            status = obx_ledger_commit(ledger, err);
        } else {
            obx_ledger_rollback(ledger); /* nothing is claimed: the batch is offered again */
        }
    }
    return status;
}

outbox_status
obx_ledger_claim(struct obx_ledger *ledger, const char *handler,
                 const struct obx_ledger_event *events, size_t count, int lease_seconds,
                 int lock_wait_ms, struct obx_claim *out, outbox_error *err)
{
    return claim(ledger, handler, events, count, lease_seconds, lock_wait_ms, 0, out, err);
}

outbox_status
obx_ledger_claim_as_done(struct obx_ledger *ledger, const char *handler,
                         const struct obx_ledger_event *events, size_t count, int lock_wait_ms,
                         struct obx_claim *out, outbox_error *err)
{
    /* Outside a transaction the rows would commit as done before any handler ran. */
    outbox_status status = obx_ledger_require_transaction(ledger, 0, "claim as done", err);

    if (status != OUTBOX_OK) {
        return status;
    }
    return claim(ledger, handler, events, count, 1, lock_wait_ms, 1, out, err);
}

/* `{…}` literals of the RUN claims' ids and tokens; `*runs` counts them. */
static outbox_status
done_arrays(const struct obx_ledger_event *events, const struct obx_claim *claims, size_t count,
            struct obx_buf *arrays, size_t *runs)
{
    const char *sep = "";

    *runs = 0;
    obx_buf_append_str(&arrays[0], "{");
    obx_buf_append_str(&arrays[1], "{");
    for (size_t i = 0; i < count; i++) {
        if (claims[i].state != OBX_CLAIM_RUN) {
            continue;
        }
        if (!is_uuid(events[i].event_id) || !is_uuid(claims[i].owner_token)) {
            return OUTBOX_EINVAL;
        }
        obx_buf_appendf(&arrays[0], "%s%s", sep, events[i].event_id);
        obx_buf_appendf(&arrays[1], "%s%s", sep, claims[i].owner_token);
        sep = ",";
        (*runs)++;
    }
    obx_buf_append_str(&arrays[0], "}");
    obx_buf_append_str(&arrays[1], "}");
    return obx_buf_failed(&arrays[0]) || obx_buf_failed(&arrays[1]) ? OUTBOX_ENOMEM : OUTBOX_OK;
}

/* A done mark's statement and parameters, built from its RUN claims. */
struct done_stmt {
    struct obx_buf arrays[5]; /* ids, tokens; with ordered events their aggregates */
    const char *params[6];
    int nparams;
    size_t which;
    size_t runs; /* RUN claims to mark; 0: no statement */
    int ordered;
};

static void
done_stmt_init(struct done_stmt *d)
{
    memset(d, 0, sizeof(*d));
    for (size_t a = 0; a < 5; a++) {
        obx_buf_init(&d->arrays[a]);
    }
}

static void
done_stmt_fini(struct done_stmt *d)
{
    for (size_t a = 0; a < 5; a++) {
        obx_buf_fini(&d->arrays[a]);
    }
}

static outbox_status
done_build(struct done_stmt *d, const char *handler, const struct obx_ledger_event *events,
           const struct obx_claim *claims, size_t count, outbox_error *err)
{
    outbox_status status = done_arrays(events, claims, count, d->arrays, &d->runs);

    if (status != OUTBOX_OK) {
        return obx_fail(err, status, "mark done: %s",
                        status == OUTBOX_ENOMEM ? "out of memory"
                                                : "a RUN claim's id or token is not a UUID");
    }
    d->ordered = obx_ledger_events_ordered(events, count);
    d->params[0] = handler;
    d->params[1] = d->arrays[0].data;
    d->params[2] = d->arrays[1].data;
    d->which = OBX_LEDGER_MARK_DONE;
    d->nparams = 3;
    if (d->ordered && d->runs > 0) {
        /* The aggregates' progress moves on with the done mark, in one statement. */
        status =
            obx_ledger_order_arrays(events, claims, OBX_CLAIM_RUN, count, 0, &d->arrays[2], err);
        d->params[3] = d->arrays[2].data;
        d->params[4] = d->arrays[3].data;
        d->params[5] = d->arrays[4].data;
        d->which = OBX_LEDGER_MARK_DONE_ORDERED;
        d->nparams = 6;
    }
    return status;
}

/* How many rows a done mark changed. */
static size_t
done_marked(const struct done_stmt *d, PGresult *res)
{
    return (size_t)strtoul(d->ordered ? PQgetvalue(res, 0, 0) : PQcmdTuples(res), NULL, 10);
}

outbox_status
obx_ledger_mark_done(struct obx_ledger *ledger, const char *handler,
                     const struct obx_ledger_event *events, const struct obx_claim *claims,
                     size_t count, size_t *marked, outbox_error *err)
{
    struct done_stmt d;
    PGresult *res = NULL;
    outbox_status status;

    obx_error_reset(err);
    *marked = 0;
    status = check_handler(handler, err);
    if (status != OUTBOX_OK) {
        return status;
    }
    done_stmt_init(&d);
    status = done_build(&d, handler, events, claims, count, err);
    if (status == OUTBOX_OK && d.runs > 0) {
        status = obx_pg_session_require(&ledger->pg, err);
        if (status == OUTBOX_OK) {
            res = obx_pg_session_exec(&ledger->pg, d.which, d.params, d.nparams);
            status = obx_pg_session_check(&ledger->pg, res, "mark done", err);
        }
        if (status == OUTBOX_OK) {
            *marked = done_marked(&d, res);
        }
    }
    PQclear(res);
    done_stmt_fini(&d);
    return status;
}

enum { ROUND_BEGIN, ROUND_DONE, ROUND_CLAIM, ROUND_COMMIT, ROUND_STEPS };

static outbox_status
mark_done_and_claim(struct obx_ledger *ledger, const char *handler,
                    const struct obx_ledger_event *done_events, const struct obx_claim *done_claims,
                    size_t done_count, size_t *marked, const struct obx_ledger_event *events,
                    size_t count, int lease_seconds, int lock_wait_ms, int fresh_ok, int *waited,
                    struct obx_claim *out, outbox_error *err)
{
    struct done_stmt d;
    struct claim_stmt c;
    struct obx_pg_step steps[ROUND_STEPS] = {
        [ROUND_BEGIN] = {.text = "BEGIN ISOLATION LEVEL READ COMMITTED"},
        [ROUND_COMMIT] = {.text = "COMMIT"}};
    PGresult *res[ROUND_STEPS] = {NULL};
    outbox_status status;
    int sent = 0, with_messages = ledger->parked_lately, commit_after = 0;
    size_t steps_sent = ROUND_STEPS;

    obx_error_reset(err);
    *marked = 0;
    status = claim_check(handler, lease_seconds, lock_wait_ms, err);
    if (status == OUTBOX_OK) {
        status = obx_pg_session_require(&ledger->pg, err);
    }
    if (status != OUTBOX_OK) {
        return status;
    }
    if (PQtransactionStatus(ledger->pg.conn) != PQTRANS_IDLE) {
        return obx_fail(err, OUTBOX_EINVAL, "mark done and claim: a transaction is already open");
    }
    done_stmt_init(&d);
    claim_stmt_init(&c);
    status = done_build(&d, handler, done_events, done_claims, done_count, err);
    if (status == OUTBOX_OK) {
        status = claim_build(&c, handler, events, count, lease_seconds, lock_wait_ms, 0, fresh_ok,
                             with_messages, err);
    }
    if (status == OUTBOX_OK) {
        /* No RUN claim to mark: the step is a statement that changes nothing. */
        steps[ROUND_DONE] =
            d.runs > 0
                ? (struct obx_pg_step){.which = d.which, .params = d.params, .nparams = d.nparams}
                : (struct obx_pg_step){.text = "SELECT 0"};
        steps[ROUND_CLAIM] =
            (struct obx_pg_step){.which = c.which, .params = c.params, .nparams = c.nparams};
        /* An ordered claim without the messages may park events, which must get theirs
         * before the commit: the commit follows once the claim is read. */
        commit_after = c.which == OBX_LEDGER_CLAIM_ORDERED && !with_messages;
        steps_sent = commit_after ? ROUND_COMMIT : ROUND_STEPS;
        status = obx_pg_session_pipeline(&ledger->pg, steps, steps_sent, res, err);
        sent = status == OUTBOX_OK;
    }
    *waited = status == OUTBOX_OK && fresh_claim_waited(&c, res[ROUND_CLAIM]);
    for (size_t i = 0; status == OUTBOX_OK && i < steps_sent; i++) {
        status = obx_pg_session_check(&ledger->pg, res[i],
                                      i == ROUND_DONE    ? "mark done"
                                      : i == ROUND_CLAIM ? "claim"
                                                         : "mark done and claim",
                                      err);
    }
    if (status == OUTBOX_OK) {
        status = claims_take(res[ROUND_CLAIM], count, out, err);
        *marked = d.runs > 0 ? done_marked(&d, res[ROUND_DONE]) : 0;
    }
    if (status == OUTBOX_OK && c.which == OBX_LEDGER_CLAIM_ORDERED) {
        status = parked_messages(ledger, handler, events, out, count, with_messages, err);
    }
    if (status == OUTBOX_OK && commit_after) {
        status = obx_ledger_commit(ledger, err);
    }
    if (status != OUTBOX_OK && sent) {
        /* A failed step leaves the transaction open and aborted: end it. */
        obx_ledger_rollback(ledger);
    }
    for (size_t i = 0; i < ROUND_STEPS; i++) {
        PQclear(res[i]);
    }
    done_stmt_fini(&d);
    claim_stmt_fini(&c);
    return status;
}

outbox_status
obx_ledger_mark_done_and_claim(struct obx_ledger *ledger, const char *handler,
                               const struct obx_ledger_event *done_events,
                               const struct obx_claim *done_claims, size_t done_count,
                               size_t *marked, const struct obx_ledger_event *events, size_t count,
                               int lease_seconds, int lock_wait_ms, struct obx_claim *out,
                               outbox_error *err)
{
    int waited = 0;
    outbox_status status =
        mark_done_and_claim(ledger, handler, done_events, done_claims, done_count, marked, events,
                            count, lease_seconds, lock_wait_ms, 1, &waited, out, err);

    if (status != OUTBOX_OK && waited) {
        /* Rolled back, marks and all: the round again, with the claim function. */
        status =
            mark_done_and_claim(ledger, handler, done_events, done_claims, done_count, marked,
                                events, count, lease_seconds, lock_wait_ms, 0, &waited, out, err);
    }
    return status;
}

/*
 * Checks what every write after a claim needs: a valid handler, a UUID
 * event id and a RUN claim, whose owner token guards the write.
 */
static outbox_status
check_owned(const char *doing, const char *handler, const struct obx_ledger_event *event,
            const struct obx_claim *claim, outbox_error *err)
{
    outbox_status status = check_handler(handler, err);

    if (status == OUTBOX_OK) {
        status = check_uuid("event_id", event != NULL ? event->event_id : NULL, err);
    }
    if (status == OUTBOX_OK && (claim == NULL || claim->state != OBX_CLAIM_RUN)) {
        status = obx_fail(err, OUTBOX_EINVAL, "%s: event %s was not claimed to run (state %d)",
                          doing, event->event_id, claim != NULL ? (int)claim->state : -1);
    }
    if (status == OUTBOX_OK) {
        status = check_uuid("owner_token", claim->owner_token, err);
    }
    return status;
}

/*
 * `reason` cut at REASON_MAX_BYTES on a character boundary, control
 * characters as '?', and every non-ASCII byte too if the text is not
 * UTF-8: the server would refuse the whole statement for one bad byte,
 * and then the failure would never be counted.
 */
static void
clean_reason(const char *reason, char *out, size_t cap)
{
    size_t len = strnlen(reason, cap - 1);
    int utf8;

    while (len > 0 && ((unsigned char)reason[len] & 0xc0) == 0x80) {
        len--; /* reason[len] continues a character: cut before it starts */
    }
    utf8 = obx_utf8_valid(reason, len);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)reason[i];
        int keep = (c >= 0x20 && c != 0x7f) && (c < 0x80 || utf8);

        out[i] = keep ? reason[i] : '?';
    }
    out[len] = '\0';
}

static outbox_status
check_policy(const struct obx_failure_policy *policy, outbox_error *err)
{
    if (policy == NULL || policy->max_attempts < 1 || policy->backoff_base_ms < 0 ||
        policy->backoff_cap_ms < 0) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "record failure: max_attempts %d must be >= 1, backoff_base_ms %d and "
                        "backoff_cap_ms %d >= 0",
                        policy ? policy->max_attempts : 0, policy ? policy->backoff_base_ms : 0,
                        policy ? policy->backoff_cap_ms : 0);
    }
    return OUTBOX_OK;
}

static void
failure_take(const PGresult *res, struct obx_failure_result *out)
{
    memset(out, 0, sizeof(*out));
    if (PQntuples(res) != 1) {
        return; /* the claim had moved on, or the row is done: nothing changed */
    }
    out->applied = 1;
    out->attempts = (int)strtol(PQgetvalue(res, 0, FAILURE_ATTEMPTS), NULL, 10);
    out->dead = strcmp(PQgetvalue(res, 0, FAILURE_DEAD), "t") == 0;
    out->retry_ms = out->dead ? 0 : strtoll(PQgetvalue(res, 0, FAILURE_RETRY_MS), NULL, 10);
}

outbox_status
obx_ledger_record_failure(struct obx_ledger *ledger, const char *handler,
                          const struct obx_ledger_event *event, const struct obx_claim *claim,
                          const char *reason, const struct obx_failure_policy *policy,
                          struct obx_failure_result *out, outbox_error *err)
{
    char reason_text[REASON_MAX_BYTES + 1], max_text[16], base_text[16], cap_text[16];
    const char *params[] = {NULL, handler, NULL, reason_text, NULL, max_text, base_text, cap_text};
    PGresult *res;
    outbox_status status;

    obx_error_reset(err);
    status = check_owned("record failure", handler, event, claim, err);
    if (status == OUTBOX_OK) {
        status = check_policy(policy, err);
    }
    if (status == OUTBOX_OK) {
        status = obx_pg_session_require(&ledger->pg, err);
    }
    if (status != OUTBOX_OK) {
        return status;
    }
    clean_reason(reason != NULL && reason[0] != '\0' ? reason : "handler failed", reason_text,
                 sizeof(reason_text));
    params[0] = event->event_id;
    params[2] = claim->owner_token;
    /* Text the server would refuse is not kept: the dead letter is written without it. */
    if (event->envelope != NULL && obx_utf8_valid(event->envelope, strlen(event->envelope))) {
        params[4] = event->envelope;
    }
    snprintf(max_text, sizeof(max_text), "%d", policy->max_attempts);
    snprintf(base_text, sizeof(base_text), "%d", policy->backoff_base_ms);
    snprintf(cap_text, sizeof(cap_text), "%d", policy->backoff_cap_ms);
    res = obx_pg_session_exec(&ledger->pg, OBX_LEDGER_RECORD_FAILURE, params, 8);
    status = obx_pg_session_check(&ledger->pg, res, "record failure", err);
    if (status == OUTBOX_OK) {
        failure_take(res, out);
    }
    PQclear(res);
    return status;
}

outbox_status
obx_ledger_release(struct obx_ledger *ledger, const char *handler,
                   const struct obx_ledger_event *event, const struct obx_claim *claim,
                   int delay_ms, outbox_error *err)
{
    char delay_text[16];
    const char *params[] = {NULL, handler, NULL, delay_text};
    PGresult *res;
    outbox_status status;

    obx_error_reset(err);
    status = check_owned("release", handler, event, claim, err);
    if (status == OUTBOX_OK && delay_ms < 0) {
        status = obx_fail(err, OUTBOX_EINVAL, "release: delay_ms %d must be >= 0", delay_ms);
    }
    if (status == OUTBOX_OK) {
        status = obx_pg_session_require(&ledger->pg, err);
    }
    if (status != OUTBOX_OK) {
        return status;
    }
    snprintf(delay_text, sizeof(delay_text), "%d", delay_ms);
    params[0] = event->event_id;
    params[2] = claim->owner_token;
    res = obx_pg_session_exec(&ledger->pg, OBX_LEDGER_RELEASE, params, 4);
    status = obx_pg_session_check(&ledger->pg, res, "release", err);
    PQclear(res);
    return status;
}

outbox_status
obx_ledger_renew(struct obx_ledger *ledger, const char *handler,
                 const struct obx_ledger_event *event, const struct obx_claim *claim,
                 int lease_seconds, int *held, outbox_error *err)
{
    char lease_text[16];
    const char *params[] = {NULL, handler, NULL, lease_text};
    PGresult *res;
    outbox_status status;

    obx_error_reset(err);
    *held = 0;
    status = check_owned("renew", handler, event, claim, err);
    if (status == OUTBOX_OK && lease_seconds < 1) {
        status =
            obx_fail(err, OUTBOX_EINVAL, "renew: lease_seconds %d must be >= 1", lease_seconds);
    }
    if (status == OUTBOX_OK) {
        status = obx_pg_session_require(&ledger->pg, err);
    }
    if (status != OUTBOX_OK) {
        return status;
    }
    snprintf(lease_text, sizeof(lease_text), "%d", lease_seconds);
    params[0] = event->event_id;
    params[2] = claim->owner_token;
    res = obx_pg_session_exec(&ledger->pg, OBX_LEDGER_RENEW, params, 4);
    status = obx_pg_session_check(&ledger->pg, res, "renew", err);
    if (status == OUTBOX_OK) {
        *held = strtol(PQcmdTuples(res), NULL, 10) > 0;
    }
    PQclear(res);
    return status;
}
