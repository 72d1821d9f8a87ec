/* SPDX-License-Identifier: MIT */
/*
 * payload.c - payload checks. The walk descends at most one level past
 * the depth limit, so recursion is bounded however deep the input is.
 */
#include "payload.h"

#include <string.h>

#include "common/error.h"
#include "common/text.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static const char *
json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    case JSON_NULL:
        return "null";
    }
    return "unknown";
}

static outbox_status
check_text(const char *s, size_t len, outbox_error *err)
{
    if (memchr(s, '\0', len) != NULL) {
        return obx_fail(
            err, OUTBOX_EINVAL,
            "payload contains a NUL character (\\u0000), which PostgreSQL cannot store");
    }
    if (!obx_utf8_valid(s, len)) {
        return obx_fail(err, OUTBOX_EINVAL, "payload contains a string that is not valid UTF-8");
    }
    return OUTBOX_OK;
}

static outbox_status
check_node(const json_t *node, int depth, outbox_error *err)
{
    outbox_status status = OUTBOX_OK;

    if (json_is_string(node)) {
        return check_text(json_string_value(node), json_string_length(node), err);
    }
    if (!json_is_object(node) && !json_is_array(node)) {
        return OUTBOX_OK;
    }
    if (depth > OUTBOX_MAX_PAYLOAD_DEPTH) {
        return obx_fail(err, OUTBOX_EINVAL, "payload is nested deeper than %d levels",
                        OUTBOX_MAX_PAYLOAD_DEPTH);
    }
    if (json_is_array(node)) {
        for (size_t i = 0; i < json_array_size(node) && status == OUTBOX_OK; i++) {
            status = check_node(json_array_get(node, i), depth + 1, err);
        }
        return status;
    }
    /* The iterator API gives key lengths, which NUL-carrying keys need. */
    for (void *it = json_object_iter((json_t *)node); it != NULL && status == OUTBOX_OK;
         it = json_object_iter_next((json_t *)node, it)) {
        status = check_text(json_object_iter_key(it), json_object_iter_key_len(it), err);
        if (status == OUTBOX_OK) {
            status = check_node(json_object_iter_value(it), depth + 1, err);
        }
    }
    return status;
}

outbox_status
obx_payload_check(const json_t *payload, outbox_error *err)
{
    if (payload == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "payload is required");
    }
    if (!json_is_object(payload)) {
        return obx_fail(err, OUTBOX_EINVAL, "payload must be a JSON object, not %s",
                        json_type_name(payload));
    }
    return check_node(payload, 1, err);
}

outbox_status
obx_payload_parse(const char *json, size_t len, json_t **out, outbox_error *err)
{
    json_error_t jerr;
    json_t *value;
    outbox_status status;

    if (json == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "payload is required");
    }
    value =
        json_loadb(json, len, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &jerr);
    if (value == NULL) {
        if (json_error_code(&jerr) == json_error_stack_overflow) {
            return obx_fail(err, OUTBOX_EINVAL, "payload is nested deeper than %d levels",
                            OUTBOX_MAX_PAYLOAD_DEPTH);
        }
        if (json_error_code(&jerr) == json_error_out_of_memory) {
            return obx_fail(err, OUTBOX_ENOMEM, "payload: out of memory");
        }
        return obx_fail(err, OUTBOX_EINVAL, "payload is not valid JSON: %s at byte %d", jerr.text,
                        jerr.position);
    }
    status = obx_payload_check(value, err);
    if (status == OUTBOX_OK && out != NULL) {
        *out = value;
        value = NULL;
    }
    json_decref(value);
    return status;
}
