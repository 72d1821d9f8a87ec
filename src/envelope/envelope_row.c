/* SPDX-License-Identifier: MIT */
/*
 * envelope_row.c - the envelope against the row it was stored in.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/text.h"
#include "envelope.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* The fields a row repeats, in OBX_ROW_ bit order, with their offsets in the head. */
static const struct {
    const char *name;
    size_t offset;
} columns[] = {
    {"id", offsetof(struct obx_envelope_head, id)},
    {"event_type", offsetof(struct obx_envelope_head, event_type)},
    {"aggregate_type", offsetof(struct obx_envelope_head, aggregate_type)},
    {"aggregate_id", offsetof(struct obx_envelope_head, aggregate_id)},
    {"tenant_id", offsetof(struct obx_envelope_head, tenant_id)},
    {"data_subject", offsetof(struct obx_envelope_head, data_subject)},
};

static const char *
field_of(const struct obx_envelope_head *h, size_t k)
{
    return *(const char *const *)((const char *)h + columns[k].offset);
}

static void
quote_or_absent(const char *value, char *out, size_t cap)
{
    if (value == NULL) {
        snprintf(out, cap, "(absent)");
    } else {
        obx_quote_for_message(value, out, cap);
    }
}

outbox_status
obx_envelope_match_row(const struct obx_envelope_head *env, const struct obx_envelope_row *row,
                       outbox_error *err)
{
    for (size_t k = 0; k < sizeof(columns) / sizeof(columns[0]); k++) {
        const char *mine = field_of(env, k), *theirs = field_of(&row->head, k);
        char a[160], b[160];

        if ((row->known & 1u << k) == 0) {
            continue;
        }
        if (mine == NULL && theirs == NULL) {
            continue;
        }
        if (mine != NULL && theirs != NULL && strcmp(mine, theirs) == 0) {
            continue;
        }
        quote_or_absent(mine, a, sizeof(a));
        quote_or_absent(theirs, b, sizeof(b));
        return obx_fail(err, OUTBOX_EINVAL,
                        "envelope %s differs from the row %s: %s in the envelope, %s in the row",
                        columns[k].name, columns[k].name, a, b);
    }
    return OUTBOX_OK;
}
