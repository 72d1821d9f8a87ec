/* SPDX-License-Identifier: MIT */
/*
 * relay_batch.c - leased rows to bus messages, bus results to row outcomes.
 */
#include "relay_batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static void
mark_invalid(struct obx_relay_row *row, const char *reason)
{
    row->outcome = OBX_ROW_INVALID;
    snprintf(row->reason, sizeof(row->reason), "%s", reason);
}

/* Validates row `i` and, if publishable, appends its message. */
static void
prepare_row(struct obx_relay_batch *b, const struct obx_lease *lease, size_t i, const char *prefix,
            size_t max_body_bytes)
{
    struct obx_relay_row *row = &b->rows[i];
    struct obx_bus_message *msg;
    struct obx_envelope_row columns;
    outbox_error err = {0};
    size_t len = 0;
    const char *json = obx_lease_envelope(lease, i, &len);

    row->outcome = OBX_ROW_DONE;
    if (obx_envelope_parse(json, len, max_body_bytes, &row->env, &err) != OUTBOX_OK) {
        mark_invalid(row, err.message);
        return;
    }
    /* The row's id column and the envelope's id are tied by a table constraint;
     * a row written with that constraint dropped must still not publish. */
    if (strcmp(row->env.head.id, obx_lease_id(lease, i)) != 0) {
        mark_invalid(row, "envelope id differs from the row id");
        return;
    }
    /* So are its route, aggregate and labels: what is published is what the row says. */
    obx_lease_row(lease, i, &columns);
    if (obx_envelope_match_row(&row->env.head, &columns, &err) != OUTBOX_OK) {
        mark_invalid(row, err.message);
        return;
    }
    if (obx_subject_build(prefix, row->env.head.aggregate_type, row->env.head.event_type,
                          row->subject, &err) != OUTBOX_OK) {
        mark_invalid(row, err.message);
        return;
    }
    snprintf(row->ce_type, sizeof(row->ce_type), "%s.%s", row->env.head.aggregate_type,
             row->env.head.event_type);
    if (row->env.head.aggregate_seq > 0) {
        snprintf(row->sequence, sizeof(row->sequence), "%lld", row->env.head.aggregate_seq);
    }
    b->msg_row[b->msg_count] = i;
    msg = &b->msgs[b->msg_count++];
    *msg = (struct obx_bus_message){
        .id = row->env.head.id,
        .subject = row->subject,
        .body = json,
        .body_len = len,
        .ce_type = row->ce_type,
        .ce_time = row->env.head.occurred_at,
        .ce_subject = row->env.head.aggregate_id,
        .traceparent = row->env.head.traceparent,
        .sequence = row->sequence[0] != '\0' ? row->sequence : NULL,
    };
}

outbox_status
obx_relay_batch_prepare(struct obx_relay_batch *b, const struct obx_lease *lease,
                        const char *subject_prefix, size_t max_body_bytes, outbox_error *err)
{
    size_t n = lease->count;

    memset(b, 0, sizeof(*b));
    b->count = n;
    if (n == 0) {
        return OUTBOX_OK;
    }
    b->rows = calloc(n, sizeof(*b->rows));
    b->msgs = calloc(n, sizeof(*b->msgs));
    b->msg_row = calloc(n, sizeof(*b->msg_row));
    b->results = calloc(n, sizeof(*b->results));
    b->outcomes = calloc(n, sizeof(*b->outcomes));
    b->reasons = calloc(n, sizeof(*b->reasons));
    b->stream_seqs = calloc(n, sizeof(*b->stream_seqs));
    if (!b->rows || !b->msgs || !b->msg_row || !b->results || !b->outcomes || !b->reasons ||
        !b->stream_seqs) {
        obx_relay_batch_fini(b);
        return obx_fail(err, OUTBOX_ENOMEM, "relay batch: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        prepare_row(b, lease, i, subject_prefix, max_body_bytes);
    }
    return OUTBOX_OK;
}

static enum obx_row_outcome
outcome_of(enum obx_publish_outcome p)
{
    switch (p) {
    case OBX_PUBLISH_OK:
        return OBX_ROW_DONE;
    case OBX_PUBLISH_REJECTED:
        return OBX_ROW_RETRY;
    case OBX_PUBLISH_TOO_LARGE:
        return OBX_ROW_INVALID;
    case OBX_PUBLISH_UNAVAILABLE:
        break;
    }
    return OBX_ROW_RELEASE;
}

void
obx_relay_batch_apply_results(struct obx_relay_batch *b)
{
    for (size_t k = 0; k < b->msg_count; k++) {
        struct obx_relay_row *row = &b->rows[b->msg_row[k]];
        const struct obx_publish_result *r = &b->results[k];

        row->outcome = outcome_of(r->outcome);
        row->duplicate = r->outcome == OBX_PUBLISH_OK && r->duplicate;
        row->stream_seq = r->outcome == OBX_PUBLISH_OK ? (long long)r->stream_seq : 0;
        snprintf(row->reason, sizeof(row->reason), "%s", r->reason);
    }
    for (size_t i = 0; i < b->count; i++) {
        b->outcomes[i] = b->rows[i].outcome;
        b->reasons[i] = b->rows[i].reason[0] ? b->rows[i].reason : NULL;
        b->stream_seqs[i] = b->rows[i].stream_seq;
    }
}

void
obx_relay_batch_set_all(struct obx_relay_batch *b, enum obx_row_outcome outcome, const char *reason)
{
    for (size_t k = 0; k < b->msg_count; k++) {
        b->results[k] = (struct obx_publish_result){.outcome = OBX_PUBLISH_UNAVAILABLE};
        snprintf(b->results[k].reason, sizeof(b->results[k].reason), "%s", reason);
    }
    obx_relay_batch_apply_results(b);
    for (size_t k = 0; k < b->msg_count; k++) {
        b->rows[b->msg_row[k]].outcome = outcome;
        b->outcomes[b->msg_row[k]] = outcome;
    }
}

void
obx_relay_batch_fini(struct obx_relay_batch *b)
{
    for (size_t i = 0; b->rows != NULL && i < b->count; i++) {
        obx_envelope_fini(&b->rows[i].env);
    }
    free(b->rows);
    free(b->msgs);
    free(b->msg_row);
    free(b->results);
    free(b->outcomes);
    free(b->reasons);
    free(b->stream_seqs);
    memset(b, 0, sizeof(*b));
}
