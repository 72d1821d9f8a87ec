/* SPDX-License-Identifier: MIT */
/*
 * cloudevents.c - an event's CloudEvents attributes as binary-mode headers
 * or a structured-mode body (see cloudevents.h).
 */
#include "cloudevents.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/banned.h" /* last: poisons unsafe functions */

void
obx_ce_attrs_of(const struct obx_envelope_head *head, const char *source, struct obx_ce_attrs *a,
                struct obx_ce_text *text)
{
    snprintf(text->type, sizeof(text->type), "%s.%s", head->aggregate_type, head->event_type);
    text->sequence[0] = '\0';
    if (head->aggregate_seq > 0) {
        snprintf(text->sequence, sizeof(text->sequence), "%lld", head->aggregate_seq);
    }
    *a = (struct obx_ce_attrs){.id = head->id,
                               .source = source,
                               .type = text->type,
                               .time = head->occurred_at,
                               .subject = head->aggregate_id,
                               .traceparent = head->traceparent,
                               .sequence = text->sequence[0] != '\0' ? text->sequence : NULL};
}

size_t
obx_ce_binary_headers(const struct obx_ce_attrs *a, struct obx_ce_header *h)
{
    size_t n = 0;

    /* The binary mode carries the data's content type as ce-datacontenttype in the NATS
     * binding and as Content-Type in HTTP's; some SDKs read one, some the other, so
     * both are sent. */
    h[n++] = (struct obx_ce_header){"Content-Type", OBX_CE_DATA_CONTENT_TYPE};
    h[n++] = (struct obx_ce_header){"ce-datacontenttype", OBX_CE_DATA_CONTENT_TYPE};
    h[n++] = (struct obx_ce_header){"ce-specversion", "1.0"};
    h[n++] = (struct obx_ce_header){"ce-id", a->id};
    if (a->type != NULL) {
        h[n++] = (struct obx_ce_header){"ce-type", a->type};
    }
    h[n++] = (struct obx_ce_header){"ce-source", a->source};
    if (a->time != NULL) {
        h[n++] = (struct obx_ce_header){"ce-time", a->time};
    }
    if (a->subject != NULL) {
        h[n++] = (struct obx_ce_header){"ce-subject", a->subject};
    }
    if (a->traceparent != NULL) {
        h[n++] = (struct obx_ce_header){"traceparent", a->traceparent};
    }
    if (a->sequence != NULL) {
        h[n++] = (struct obx_ce_header){"ce-sequence", a->sequence};
    }
    return n;
}

void
obx_ce_structured(const struct obx_ce_attrs *a, const char *data, size_t data_len,
                  struct obx_buf *out)
{
    struct obx_ce_header h[OBX_CE_MAX_HEADERS];
    size_t n = obx_ce_binary_headers(a, h);
    json_t *event = json_object();
    char *text;

    for (size_t i = 0; i < n; i++) {
        const char *key = strncmp(h[i].key, "ce-", 3) == 0 ? h[i].key + 3 : h[i].key;

        if (strcmp(h[i].key, "Content-Type") != 0) {
            json_object_set_new(event, key, json_string(h[i].value));
        }
    }
    /* The data is JSON: it goes in as a value, not as a string holding JSON. */
    json_object_set_new(event, "data", json_loadb(data, data_len, JSON_DECODE_ANY, NULL));
    text = json_dumps(event, JSON_COMPACT);
    if (text != NULL) {
        obx_buf_append(out, text, strlen(text));
    }
    free(text);
    json_decref(event);
}
