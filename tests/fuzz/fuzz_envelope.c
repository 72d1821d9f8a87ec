/* SPDX-License-Identifier: MIT */
/*
 * fuzz_envelope.c - an envelope as a foreign writer may have stored it:
 * the relay and the DB feed parse every row's envelope before anything is
 * published or run.
 *
 * Beyond memory safety it holds the one-pass scanner to the full parse
 * (the same verdict, reason and fields), a parsed envelope to the row
 * built from its own fields, and the size limit to its byte count.
 */
#include <stdint.h>
#include <string.h>

#include "envelope/envelope.h"
#include "envelope/subject.h"
#include "fuzz.h"

static int
same_field(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static int
same_head(const struct obx_envelope_head *a, const struct obx_envelope_head *b)
{
    return same_field(a->id, b->id) && same_field(a->event_type, b->event_type) &&
           same_field(a->aggregate_type, b->aggregate_type) &&
           same_field(a->aggregate_id, b->aggregate_id) && same_field(a->tenant_id, b->tenant_id) &&
           same_field(a->occurred_at, b->occurred_at) &&
           same_field(a->data_subject, b->data_subject) &&
           same_field(a->traceparent, b->traceparent);
}

int
obx_fuzz_envelope(const uint8_t *data, size_t size)
{
    const char *json = (const char *)data;
    struct obx_envelope fast = {0}, tree = {0}, capped = {0};
    outbox_error e1 = {0}, e2 = {0}, e3 = {0};
    outbox_status s1 = obx_envelope_parse(json, size, SIZE_MAX, &fast, &e1);
    outbox_status s2 = obx_envelope_parse_tree(json, size, SIZE_MAX, &tree, &e2);

    obx_fuzz_require(s1 == s2 && strcmp(e1.message, e2.message) == 0,
                     "the scanner and the full parse disagree on the verdict or its reason");
    if (s1 == OUTBOX_OK) {
        struct obx_envelope_row row = {.head = fast.head, .known = ~0u};
        char subject[OBX_SUBJECT_CAP];

        obx_fuzz_require(same_head(&fast.head, &tree.head),
                         "the scanner and the full parse read different fields");
        obx_fuzz_require(obx_envelope_match_row(&fast.head, &row, &e3) == OUTBOX_OK,
                         "an envelope does not match the row of its own fields");
        obx_fuzz_require(obx_subject_build("events", fast.head.aggregate_type, fast.head.event_type,
                                           subject, &e3) == OUTBOX_OK,
                         "a valid envelope has no subject");
        obx_fuzz_require(obx_envelope_parse(json, size, size - 1, &capped, &e3) != OUTBOX_OK,
                         "an envelope over the size limit was accepted");
    } else {
        obx_fuzz_require(e1.message[0] != '\0' && e2.message[0] != '\0',
                         "a refused envelope has no reason");
    }
    obx_envelope_fini(&fast);
    obx_envelope_fini(&tree);
    obx_envelope_fini(&capped);
    return 0;
}
