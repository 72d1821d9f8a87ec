/* SPDX-License-Identifier: MIT */
/*
 * envelope.h - the v1 envelope: serialize it (writer) and parse and check
 * it again (relay, outboxctl validate).
 *
 * {"id","event_type","aggregate_type","aggregate_id","tenant_id"?,
 *  "occurred_at","schema_version":1,"data_subject"?,"traceparent"?,"payload",
 *  "aggregate_seq"?}
 *
 * aggregate_seq is never written by a writer: the database gives it to the
 * events of an ordered schema (migration 0014), 1, 2, 3 ... per aggregate
 * in commit order.
 *
 * DESIGN validates an envelope three times: by the writer, by table
 * constraints, and by the relay before publishing. The first and third
 * share these functions, so they cannot disagree.
 */
#ifndef OBX_ENVELOPE_H
#define OBX_ENVELOPE_H

#include <stddef.h>

#include "common/buf.h"
#include "outbox/outbox.h"

/* An envelope's fields but the payload; optional ones NULL when absent. */
struct obx_envelope_head {
    const char *id;
    const char *event_type;
    const char *aggregate_type;
    const char *aggregate_id;
    const char *tenant_id;
    const char *occurred_at;
    const char *data_subject;
    const char *traceparent;
    long long aggregate_seq; /* the aggregate's sequence number; 0: none (unordered) */
};

/* The fields of an envelope being written; all borrowed. */
struct obx_envelope_fields {
    struct obx_envelope_head head;
    const char *payload_json; /* already checked JSON text of the payload object */
    size_t payload_len;
};

/* Appends the compact envelope JSON to `out` (check obx_buf_failed afterwards). */
void obx_envelope_serialize(const struct obx_envelope_fields *f, struct obx_buf *out);

/* A stored envelope, parsed and checked. */
struct obx_envelope {
    char *store;                   /* owned: the fields below, each NUL-terminated */
    struct obx_envelope_head head; /* points into `store` */
};

/*
 * Parses `json` and checks every v1 rule, including the size limit
 * `max_bytes` on the text. On failure (OUTBOX_EINVAL) the message is the
 * quarantine reason, and `out` is left empty.
 */
outbox_status obx_envelope_parse(const char *json, size_t len, size_t max_bytes,
                                 struct obx_envelope *out, outbox_error *err);

/*
 * The same verdict always through a jansson tree; obx_envelope_parse takes
 * this path only when its one-pass scanner is not sure. For tests that hold
 * the two to the same answers.
 */
outbox_status obx_envelope_parse_tree(const char *json, size_t len, size_t max_bytes,
                                      struct obx_envelope *out, outbox_error *err);

void obx_envelope_fini(struct obx_envelope *env);

/*
 * The columns of the row an envelope was stored in, where the reader
 * fetched them: `known` has an OBX_ROW_ bit per column read; a known
 * column may be NULL (SQL NULL). A dead letter has none of them.
 */
enum {
    OBX_ROW_ID = 1u << 0,
    OBX_ROW_EVENT_TYPE = 1u << 1,
    OBX_ROW_AGGREGATE_TYPE = 1u << 2,
    OBX_ROW_AGGREGATE_ID = 1u << 3,
    OBX_ROW_TENANT_ID = 1u << 4,
    OBX_ROW_DATA_SUBJECT = 1u << 5,
};

struct obx_envelope_row {
    struct obx_envelope_head head; /* occurred_at and traceparent are not columns */
    unsigned known;
};

/*
 * OUTBOX_EINVAL unless each known column equals the envelope's field:
 * the table rule ties them, but a row written past the rules (a dropped
 * trigger, a restore) must not publish under another route or aggregate.
 * The message names the field and both values.
 */
outbox_status obx_envelope_match_row(const struct obx_envelope_head *env,
                                     const struct obx_envelope_row *row, outbox_error *err);

#endif
