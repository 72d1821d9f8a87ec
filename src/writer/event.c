/* SPDX-License-Identifier: MIT */
/*
 * event.c - building an event: the public outbox_event_* functions.
 *
 * Every setter checks its own field at once, so a mistake is reported
 * where it is made; the envelope is serialized lazily and cached until a
 * setter changes the event.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/buf.h"
#include "common/error.h"
#include "common/uuid7.h"
#include "envelope/envelope.h"
#include "envelope/fields.h"
#include "envelope/payload.h"
#include "envelope/subject.h"
#include "writer_internal.h"

#include "common/banned.h" /* last: poisons unsafe functions */

struct outbox_event {
    char id[OBX_UUID_TEXT_LEN + 1];
    char aggregate_id[OBX_UUID_TEXT_LEN + 1]; /* "" until set */
    char occurred_at[32];
    char *aggregate_type; /* owned; NULL until set */
    char *event_type;     /* owned */
    char *tenant_id;      /* owned; optional */
    char *data_subject;   /* owned; optional */
    char *traceparent;    /* owned; optional */
    char *payload_json;   /* owned; checked JSON text of an object */
    size_t payload_len;
    struct obx_buf envelope; /* cached serialization */
    int envelope_fresh;      /* `envelope` matches the fields */
};

outbox_event *
outbox_event_new(void)
{
    outbox_event *ev = calloc(1, sizeof(*ev));
    struct timespec now;
    uint8_t id[16];

    if (ev == NULL) {
        return NULL;
    }
    if (obx_uuid7_generate(id) != 0) {
        free(ev);
        return NULL;
    }
    obx_uuid_format(id, ev->id);
    clock_gettime(CLOCK_REALTIME, &now);
    obx_format_timestamp_ms((int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000, ev->occurred_at,
                            NULL);
    obx_buf_init(&ev->envelope);
    return ev;
}

void
outbox_event_free(outbox_event *ev)
{
    if (ev == NULL) {
        return;
    }
    free(ev->aggregate_type);
    free(ev->event_type);
    free(ev->tenant_id);
    free(ev->data_subject);
    free(ev->traceparent);
    free(ev->payload_json);
    obx_buf_fini(&ev->envelope);
    free(ev);
}

/* Replaces `*slot` with a copy of `value` (NULL clears). */
static outbox_status
replace_string(char **slot, const char *value, outbox_error *err)
{
    char *copy = NULL;

    if (value != NULL && (copy = strdup(value)) == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    free(*slot);
    *slot = copy;
    return OUTBOX_OK;
}

outbox_status
outbox_event_set_route(outbox_event *ev, const char *aggregate_type, const char *event_type,
                       outbox_error *err)
{
    char *agg = NULL, *type = NULL;
    outbox_status status;

    obx_error_reset(err);
    status = obx_route_check(aggregate_type, event_type, err);
    if (status == OUTBOX_OK) {
        status = replace_string(&agg, aggregate_type, err);
    }
    if (status == OUTBOX_OK) {
        status = replace_string(&type, event_type, err);
    }
    if (status != OUTBOX_OK) {
        free(agg);
        free(type);
        return status;
    }
    free(ev->aggregate_type);
    free(ev->event_type);
    ev->aggregate_type = agg;
    ev->event_type = type;
    ev->envelope_fresh = 0;
    return OUTBOX_OK;
}

outbox_status
outbox_event_set_aggregate_id(outbox_event *ev, const char *aggregate_id, outbox_error *err)
{
    char canonical[OBX_UUID_TEXT_LEN + 1];
    outbox_status status;

    obx_error_reset(err);
    status = obx_check_uuid_field("aggregate_id", aggregate_id, canonical, err);
    if (status == OUTBOX_OK) {
        memcpy(ev->aggregate_id, canonical, sizeof(canonical));
        ev->envelope_fresh = 0;
    }
    return status;
}

/* Takes `text` (malloc'd) as the payload. */
static void
adopt_payload(outbox_event *ev, char *text, size_t len)
{
    free(ev->payload_json);
    ev->payload_json = text;
    ev->payload_len = len;
    ev->envelope_fresh = 0;
}

outbox_status
outbox_event_set_payload(outbox_event *ev, json_t *payload, outbox_error *err)
{
    char *text;
    outbox_status status;

    obx_error_reset(err);
    status = obx_payload_check(payload, err);
    if (status != OUTBOX_OK) {
        return status;
    }
    text = json_dumps(payload, JSON_COMPACT | JSON_ENCODE_ANY);
    if (text == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "payload: out of memory");
    }
    adopt_payload(ev, text, strlen(text));
    return OUTBOX_OK;
}

outbox_status
outbox_event_set_payload_json(outbox_event *ev, const char *json, size_t len, outbox_error *err)
{
    char *text;
    outbox_status status;

    obx_error_reset(err);
    status = obx_payload_parse(json, len, NULL, err);
    if (status != OUTBOX_OK) {
        return status;
    }
    /* Keep the caller's text: its numbers keep their exact digits. */
    text = malloc(len + 1);
    if (text == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "payload: out of memory");
    }
    memcpy(text, json, len);
    text[len] = '\0';
    adopt_payload(ev, text, len);
    return OUTBOX_OK;
}

static outbox_status
set_label(outbox_event *ev, char **slot, const char *field, const char *value, size_t max_bytes,
          outbox_error *err)
{
    outbox_status status;

    obx_error_reset(err);
    status = obx_check_label_field(field, value, max_bytes, err);
    if (status == OUTBOX_OK) {
        status = replace_string(slot, value, err);
    }
    ev->envelope_fresh = 0;
    return status;
}

outbox_status
outbox_event_set_tenant_id(outbox_event *ev, const char *tenant_id, outbox_error *err)
{
    return set_label(ev, &ev->tenant_id, "tenant_id", tenant_id, OUTBOX_MAX_TENANT_BYTES, err);
}

outbox_status
outbox_event_set_data_subject(outbox_event *ev, const char *data_subject, outbox_error *err)
{
    return set_label(ev, &ev->data_subject, "data_subject", data_subject,
                     OUTBOX_MAX_DATA_SUBJECT_BYTES, err);
}

outbox_status
outbox_event_set_traceparent(outbox_event *ev, const char *traceparent, outbox_error *err)
{
    outbox_status status;

    obx_error_reset(err);
    status = obx_check_traceparent(traceparent, err);
    if (status == OUTBOX_OK) {
        status = replace_string(&ev->traceparent, traceparent, err);
    }
    ev->envelope_fresh = 0;
    return status;
}

outbox_status
outbox_event_set_occurred_at_ms(outbox_event *ev, int64_t unix_ms, outbox_error *err)
{
    char text[32];
    outbox_status status;

    obx_error_reset(err);
    status = obx_format_timestamp_ms(unix_ms, text, err);
    if (status == OUTBOX_OK) {
        memcpy(ev->occurred_at, text, sizeof(text));
        ev->envelope_fresh = 0;
    }
    return status;
}

const char *
outbox_event_id(const outbox_event *ev)
{
    return ev->id;
}

/* The required fields, in the order outbox.event_error() checks them. */
static outbox_status
check_complete(const outbox_event *ev, outbox_error *err)
{
    if (ev->aggregate_type == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "aggregate_type is required");
    }
    if (ev->aggregate_id[0] == '\0') {
        return obx_fail(err, OUTBOX_EINVAL, "aggregate_id is required");
    }
    if (ev->payload_json == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "payload is required");
    }
    return OUTBOX_OK;
}

outbox_status
obx_event_envelope(outbox_event *ev, const char **json, size_t *len, outbox_error *err)
{
    struct obx_envelope_fields f;
    outbox_status status = check_complete(ev, err);

    if (status != OUTBOX_OK) {
        return status;
    }
    if (!ev->envelope_fresh) {
        f = (struct obx_envelope_fields){
            .head = {.id = ev->id,
                     .event_type = ev->event_type,
                     .aggregate_type = ev->aggregate_type,
                     .aggregate_id = ev->aggregate_id,
                     .tenant_id = ev->tenant_id,
                     .occurred_at = ev->occurred_at,
                     .data_subject = ev->data_subject,
                     .traceparent = ev->traceparent},
            .payload_json = ev->payload_json,
            .payload_len = ev->payload_len,
        };
        obx_buf_reset(&ev->envelope);
        obx_envelope_serialize(&f, &ev->envelope);
        if (obx_buf_failed(&ev->envelope)) {
            return obx_fail(err, OUTBOX_ENOMEM, "envelope: out of memory");
        }
        ev->envelope_fresh = 1;
    }
    *json = ev->envelope.data;
    *len = ev->envelope.len;
    return OUTBOX_OK;
}

outbox_status
outbox_event_envelope_json(outbox_event *ev, const char **json, size_t *len, outbox_error *err)
{
    obx_error_reset(err);
    return obx_event_envelope(ev, json, len, err);
}

void
obx_event_columns(const outbox_event *ev, const char *out[6])
{
    out[0] = ev->id;
    out[1] = ev->aggregate_type;
    out[2] = ev->aggregate_id;
    out[3] = ev->event_type;
    out[4] = ev->tenant_id;
    out[5] = ev->data_subject;
}
