/* SPDX-License-Identifier: MIT */
/*
 * owned_strings.c - owned copies of option strings, and bounds checks.
 */
#include "owned_strings.h"

#include "error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "banned.h" /* last: poisons unsafe functions */

int
obx_owned_strings_adopt(struct obx_owned_strings *owned, const char **const *slots, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *copy;

        if (*slots[i] == NULL) {
            continue;
        }
        if (owned->count >= OBX_OWNED_STRINGS_MAX || (copy = strdup(*slots[i])) == NULL) {
            return -1;
        }
        owned->copies[owned->count++] = copy;
        *slots[i] = copy;
    }
    return 0;
}

void
obx_owned_strings_fini(struct obx_owned_strings *owned)
{
    for (int i = 0; i < owned->count; i++) {
        free(owned->copies[i]);
    }
    owned->count = 0;
}

void
obx_default_replica_name(char *out, size_t cap)
{
    char host[64] = "host";

    gethostname(host, sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    snprintf(out, cap, "%s-%ld", host, (long)getpid());
}

outbox_status
obx_check_ranges(const struct obx_range *ranges, size_t count, outbox_error *err)
{
    for (size_t i = 0; i < count; i++) {
        if (ranges[i].value < ranges[i].min || ranges[i].value > ranges[i].max) {
            return obx_fail(err, OUTBOX_EINVAL, "%s %lld is outside %lld to %lld", ranges[i].name,
                            ranges[i].value, ranges[i].min, ranges[i].max);
        }
    }
    return OUTBOX_OK;
}
