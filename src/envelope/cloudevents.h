/* SPDX-License-Identifier: MIT */
/*
 * cloudevents.h - an event's CloudEvents 1.0 attributes, and how they
 * travel (cloudevents.c): as ce-* headers in the binary mode, which the
 * NATS and the HTTP protocol bindings share (the relay's messages, the
 * http: handler's requests), or as one JSON object in the structured mode.
 * docs/cloudevents.md lists them.
 */
#ifndef OBX_CLOUDEVENTS_H
#define OBX_CLOUDEVENTS_H

#include <stddef.h>

#include "common/buf.h"
#include "envelope.h"

/* The attributes; all borrowed. NULL: absent (type, time, subject, traceparent, sequence). */
struct obx_ce_attrs {
    const char *id;
    const char *source;
    const char *type;        /* {aggregate_type}.{event_type} */
    const char *time;        /* occurred_at */
    const char *subject;     /* aggregate_id */
    const char *traceparent; /* the distributed-tracing extension */
    const char *sequence;    /* aggregate_seq as decimal text (the sequence extension) */
};

/* Room for what obx_ce_attrs_of() writes besides pointers into the head. */
struct obx_ce_text {
    char type[260];
    char sequence[24];
};

/* The attributes of the event whose envelope head is `head`, from `source`. */
void obx_ce_attrs_of(const struct obx_envelope_head *head, const char *source,
                     struct obx_ce_attrs *a, struct obx_ce_text *text);

struct obx_ce_header {
    const char *key;
    const char *value;
};

enum { OBX_CE_MAX_HEADERS = 10 };

/* The data's content type: an envelope is JSON. */
#define OBX_CE_DATA_CONTENT_TYPE "application/json"

/*
 * The binary mode's headers (at most OBX_CE_MAX_HEADERS) into `out`:
 * Content-Type and ce-datacontenttype, ce-specversion, ce-id, ce-source,
 * and ce-type, ce-time, ce-subject, traceparent, ce-sequence when present.
 * Returns how many.
 */
size_t obx_ce_binary_headers(const struct obx_ce_attrs *a, struct obx_ce_header *out);

/* The structured mode's media type, and its body: the attributes and `data` (JSON text). */
#define OBX_CE_STRUCTURED_CONTENT_TYPE "application/cloudevents+json; charset=utf-8"
void obx_ce_structured(const struct obx_ce_attrs *a, const char *data, size_t data_len,
                       struct obx_buf *out);

#endif
