/* SPDX-License-Identifier: MIT */
/*
 * envelope_cases.h - loads tests/data/envelopes/ so the C writer and the
 * SQL writer run the very same cases (see that folder's README).
 */
#ifndef OBX_ENVELOPE_CASES_H
#define OBX_ENVELOPE_CASES_H

#include <stddef.h>

#include <jansson.h>

#include "outbox/outbox.h"

struct envelope_case {
    char *name;
    /* NULL when the case does not set the field. */
    char *aggregate_type;
    char *aggregate_id;
    char *event_type;
    char *tenant_id;
    char *data_subject;
    char *traceparent;
    char *payload_text; /* the payload as JSON text; NULL when absent */
    size_t payload_len;
    json_t *payload_value;    /* the same payload in memory, when it can be built; owned */
    char *expected_error;     /* invalid cases: substring of the C message */
    char *expected_sql_error; /* invalid cases: substring of the SQL message */
};

/* Loads every case of `kind` ("valid" or "invalid"); returns how many. */
size_t envelope_cases_load(const char *kind, struct envelope_case **out);
void envelope_cases_free(struct envelope_case *cases, size_t count);

/*
 * Builds the event through the public setters, in the order the SQL
 * function checks fields. With `in_memory`, the payload goes through
 * outbox_event_set_payload(json_t) instead of the JSON-text setter.
 * On failure `*out` is NULL and `err` says why.
 */
outbox_status envelope_case_build(const struct envelope_case *c, int in_memory, outbox_event **out,
                                  outbox_error *err);

#endif
