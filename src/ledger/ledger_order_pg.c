/* SPDX-License-Identifier: MIT */
/*
 * ledger_order_pg.c - the ledger's side of per-aggregate order (migration
 * 0017): the arrays an ordered claim and done mark carry, and the parked
 * events a sweep takes and settles (see ledger.h).
 *
 * A handler runs an aggregate's event n only after n - 1 is done or
 * skipped for it; the check and the progress it reads are the database's,
 * under a row lock, so neither the feed's order nor which replica got
 * which message matters. Text arrays carry strings the consumer received
 * (subjects, envelopes), so each element is quoted.
 */
#include "ledger.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "common/buf.h"
#include "common/error.h"
#include "common/uuid7.h"
#include "ledger_int.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* Column order of ledger_parked_take.sql. */
enum { TAKE_EVENT_ID, TAKE_MESSAGE_ID, TAKE_SUBJECT, TAKE_ENVELOPE, TAKE_LEASE_TOKEN };

int
obx_ledger_events_ordered(const struct obx_ledger_event *events, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        if (events[i].aggregate_seq > 0) {
            return 1;
        }
    }
    return 0;
}

/* One element of a text[] literal: NULL, or the text in quotes with " and \ escaped. */
static void
append_element(struct obx_buf *b, const char *sep, const char *text)
{
    obx_buf_append_str(b, sep);
    if (text == NULL) {
        obx_buf_append_str(b, "NULL");
        return;
    }
    obx_buf_append_str(b, "\"");
    for (const char *p = text; *p != '\0';) {
        size_t plain = strcspn(p, "\"\\");

        obx_buf_append(b, p, plain);
        p += plain;
        if (*p != '\0') {
            obx_buf_append(b, "\\", 1);
            obx_buf_append(b, p, 1);
            p++;
        }
    }
    obx_buf_append_str(b, "\"");
}

static int
is_uuid(const char *s)
{
    uint8_t scratch[16];

    return s != NULL && obx_uuid_parse(s, scratch) == 0;
}

outbox_status
obx_ledger_order_arrays(const struct obx_ledger_event *events, const struct obx_claim *claims,
                        enum obx_claim_state keep, size_t count, int with_message,
                        struct obx_buf *arrays, outbox_error *err)
{
    size_t n = with_message ? OBX_ORDER_ARRAYS : 3;
    const char *sep = "";

    for (size_t a = 0; a < n; a++) {
        obx_buf_append_str(&arrays[a], "{");
    }
    for (size_t i = 0; i < count; i++) {
        const struct obx_ledger_event *e = &events[i];
        int ordered = e->aggregate_seq > 0;
        char seq[24];

        if (claims != NULL && claims[i].state != keep) {
            continue; /* e.g. the done mark's arrays hold the RUN claims only */
        }
        if (ordered && (e->aggregate_type == NULL || !is_uuid(e->aggregate_id))) {
            return obx_fail(err, OUTBOX_EINVAL,
                            "ordered event %s: aggregate_type and a UUID aggregate_id are required",
                            e->event_id ? e->event_id : "");
        }
        snprintf(seq, sizeof(seq), "%lld", e->aggregate_seq);
        append_element(&arrays[0], sep, ordered ? e->aggregate_type : NULL);
        append_element(&arrays[1], sep, ordered ? e->aggregate_id : NULL);
        append_element(&arrays[2], sep, ordered ? seq : NULL);
        if (with_message) {
            append_element(&arrays[3], sep, ordered ? e->message_id : NULL);
            append_element(&arrays[4], sep, ordered ? e->subject : NULL);
            append_element(&arrays[5], sep, ordered ? e->envelope : NULL);
        }
        sep = ",";
    }
    for (size_t a = 0; a < n; a++) {
        obx_buf_append_str(&arrays[a], "}");
        if (obx_buf_failed(&arrays[a])) {
            return obx_fail(err, OUTBOX_ENOMEM, "ordered claim: out of memory");
        }
    }
    return OUTBOX_OK;
}

void
obx_parked_set_fini(struct obx_parked_set *set)
{
    for (size_t i = 0; set->rows != NULL && i < set->count; i++) {
        free(set->rows[i].message_id);
        free(set->rows[i].subject);
        free(set->rows[i].envelope);
    }
    free(set->rows);
    memset(set, 0, sizeof(*set));
}

outbox_status
obx_ledger_parked_fill(struct obx_ledger *ledger, const char *handler,
                       const struct obx_ledger_event *events, const struct obx_claim *claims,
                       size_t count, outbox_error *err)
{
    struct obx_buf ids, arrays[OBX_ORDER_ARRAYS];
    const char *params[5] = {handler};
    outbox_status status;

    obx_buf_init(&ids);
    for (size_t a = 0; a < OBX_ORDER_ARRAYS; a++) {
        obx_buf_init(&arrays[a]);
    }
    obx_buf_append_str(&ids, "{");
    for (size_t i = 0; i < count; i++) {
        if (claims[i].state == OBX_CLAIM_PARKED) {
            obx_buf_appendf(&ids, "%s%s", ids.len > 1 ? "," : "", events[i].event_id);
        }
    }
    obx_buf_append_str(&ids, "}");
    status = obx_ledger_order_arrays(events, claims, OBX_CLAIM_PARKED, count, 1, arrays, err);
    if (status == OUTBOX_OK && obx_buf_failed(&ids)) {
        status = obx_fail(err, OUTBOX_ENOMEM, "fill parked events: out of memory");
    }
    if (status == OUTBOX_OK) {
        params[1] = ids.data;
        params[2] = arrays[3].data; /* message ids, subjects, envelopes */
        params[3] = arrays[4].data;
        params[4] = arrays[5].data;
        status = obx_pg_session_run(&ledger->pg, OBX_LEDGER_PARKED_FILL, params, 5,
                                    "fill parked events", err);
    }
    for (size_t a = 0; a < OBX_ORDER_ARRAYS; a++) {
        obx_buf_fini(&arrays[a]);
    }
    obx_buf_fini(&ids);
    return status;
}

static outbox_status
parked_rows(const PGresult *res, struct obx_parked_set *out, outbox_error *err)
{
    size_t n = (size_t)PQntuples(res);

    out->rows = calloc(n + 1, sizeof(*out->rows));
    if (out->rows == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "take parked events: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        struct obx_parked *p = &out->rows[i];
        int row = (int)i;

        out->count = i + 1;
        snprintf(p->event_id, sizeof(p->event_id), "%s", PQgetvalue(res, row, TAKE_EVENT_ID));
        snprintf(p->lease_token, sizeof(p->lease_token), "%s",
                 PQgetvalue(res, row, TAKE_LEASE_TOKEN));
        p->message_id = strdup(PQgetvalue(res, row, TAKE_MESSAGE_ID));
        p->subject = strdup(PQgetvalue(res, row, TAKE_SUBJECT));
        p->envelope = strdup(PQgetvalue(res, row, TAKE_ENVELOPE));
        p->envelope_len = (size_t)PQgetlength(res, row, TAKE_ENVELOPE);
        if (p->message_id == NULL || p->subject == NULL || p->envelope == NULL) {
            return obx_fail(err, OUTBOX_ENOMEM, "take parked events: out of memory");
        }
    }
    return OUTBOX_OK;
}

outbox_status
obx_ledger_parked_take(struct obx_ledger *ledger, const char *handler, int max, int lease_seconds,
                       struct obx_parked_set *out, outbox_error *err)
{
    char max_text[16], lease_text[16];
    const char *params[] = {handler, max_text, lease_text};
    PGresult *res;
    outbox_status status;

    obx_error_reset(err);
    memset(out, 0, sizeof(*out));
    if (handler == NULL || handler[0] == '\0' || max < 1 || lease_seconds < 1) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "take parked events: handler \"%.64s\" must be given, max %d and "
                        "lease_seconds %d >= 1",
                        handler ? handler : "", max, lease_seconds);
    }
    status = obx_pg_session_require(&ledger->pg, err);
    if (status != OUTBOX_OK) {
        return status;
    }
    snprintf(max_text, sizeof(max_text), "%d", max);
    snprintf(lease_text, sizeof(lease_text), "%d", lease_seconds);
    res = obx_pg_session_exec(&ledger->pg, OBX_LEDGER_PARKED_TAKE, params, 3);
    status = obx_pg_session_check(&ledger->pg, res, "take parked events", err);
    if (status == OUTBOX_OK) {
        status = parked_rows(res, out, err);
    }
    PQclear(res);
    return status;
}

outbox_status
obx_ledger_parked_settle(struct obx_ledger *ledger, const char *handler,
                         const struct obx_parked *const *rows, const long long *delay_ms,
                         size_t count, int extend_seconds, outbox_error *err)
{
    struct obx_buf ids, tokens, delays;
    char extend_text[16];
    const char *params[] = {handler, NULL, NULL, NULL, NULL};
    outbox_status status;

    obx_error_reset(err);
    if (count == 0) {
        return OUTBOX_OK;
    }
    obx_buf_init(&ids);
    obx_buf_init(&tokens);
    obx_buf_init(&delays);
    obx_buf_append_str(&ids, "{");
    obx_buf_append_str(&tokens, "{");
    obx_buf_append_str(&delays, "{");
    for (size_t i = 0; i < count; i++) {
        const char *sep = i > 0 ? "," : "";

        obx_buf_appendf(&ids, "%s%s", sep, rows[i]->event_id);
        obx_buf_appendf(&tokens, "%s%s", sep, rows[i]->lease_token);
        if (extend_seconds > 0 || delay_ms[i] < 0) {
            obx_buf_appendf(&delays, "%sNULL", sep);
        } else {
            obx_buf_appendf(&delays, "%s%lld", sep, delay_ms[i]);
        }
    }
    obx_buf_append_str(&ids, "}");
    obx_buf_append_str(&tokens, "}");
    obx_buf_append_str(&delays, "}");
    if (obx_buf_failed(&ids) || obx_buf_failed(&tokens) || obx_buf_failed(&delays)) {
        status = obx_fail(err, OUTBOX_ENOMEM, "settle parked events: out of memory");
    } else {
        snprintf(extend_text, sizeof(extend_text), "%d", extend_seconds);
        params[1] = ids.data;
        params[2] = tokens.data;
        params[3] = delays.data;
        params[4] = extend_seconds > 0 ? extend_text : NULL;
        status = obx_pg_session_require(&ledger->pg, err);
        if (status == OUTBOX_OK) {
            status = obx_pg_session_run(&ledger->pg, OBX_LEDGER_PARKED_SETTLE, params, 5,
                                        "settle parked events", err);
        }
    }
    obx_buf_fini(&delays);
    obx_buf_fini(&tokens);
    obx_buf_fini(&ids);
    return status;
}
