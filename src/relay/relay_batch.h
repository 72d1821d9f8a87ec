/* SPDX-License-Identifier: MIT */
/*
 * relay_batch.h - turning a leased batch into bus messages, and bus
 * results into row outcomes. Pure: no I/O, unit-tested without servers.
 *
 * Every row is validated again here (DESIGN's third check): a row that
 * fails becomes OBX_ROW_INVALID with the reason and is never published,
 * while the rest of its batch goes on.
 */
#ifndef OBX_RELAY_BATCH_H
#define OBX_RELAY_BATCH_H

#include <stddef.h>

#include "bus/bus.h"
#include "envelope/envelope.h"
#include "envelope/subject.h"
#include "store/store.h"

struct obx_relay_row {
    struct obx_envelope env; /* parsed; empty when the row is invalid */
    char subject[OBX_SUBJECT_CAP];
    char ce_type[OUTBOX_MAX_ROUTE_BYTES + 1];
    char sequence[24];            /* env.head.aggregate_seq as text; "" when the event has none */
    enum obx_row_outcome outcome; /* decided by prepare (INVALID) or by the results */
    char reason[512];             /* for last_error; "" when none */
    int duplicate;                /* the broker already had it */
    long long stream_seq;         /* DONE through JetStream: the PubAck's sequence; 0 otherwise */
};

struct obx_relay_batch {
    size_t count;                 /* rows in the lease */
    struct obx_relay_row *rows;   /* owned, `count` entries */
    struct obx_bus_message *msgs; /* owned: the rows that are publishable */
    size_t *msg_row;              /* owned: msgs[k] belongs to rows[msg_row[k]] */
    size_t msg_count;
    struct obx_publish_result *results; /* owned, msg_count entries once collected */
    enum obx_row_outcome *outcomes;     /* owned, per row, for obx_store_finish */
    const char **reasons;               /* owned array; entries borrow rows[i].reason */
    long long *stream_seqs;             /* owned, per row, for obx_store_finish (0: none) */
};

/*
 * Builds messages for every leased row that passes validation and fits
 * `max_body_bytes`. Rows that do not are marked INVALID with a reason.
 * Returns OUTBOX_ENOMEM only; bad rows are not errors.
 */
outbox_status obx_relay_batch_prepare(struct obx_relay_batch *batch, const struct obx_lease *lease,
                                      const char *subject_prefix, size_t max_body_bytes,
                                      outbox_error *err);

/* Maps the collected results (batch->results) onto row outcomes and reasons. */
void obx_relay_batch_apply_results(struct obx_relay_batch *batch);

/* Marks every publishable row with `outcome` (e.g. RELEASE when the broker is gone). */
void obx_relay_batch_set_all(struct obx_relay_batch *batch, enum obx_row_outcome outcome,
                             const char *reason);

void obx_relay_batch_fini(struct obx_relay_batch *batch);

#endif
