/* SPDX-License-Identifier: MIT */
/*
 * owned_strings.h - what every worker's options need: owned copies of the
 * string fields (the caller's strings need only live until the _new()
 * call returns), bounds checks, and a default replica name.
 */
#ifndef OBX_OWNED_STRINGS_H
#define OBX_OWNED_STRINGS_H

#include <stddef.h>

#include "outbox/outbox.h"

enum { OBX_OWNED_STRINGS_MAX = 24 };

struct obx_owned_strings {
    char *copies[OBX_OWNED_STRINGS_MAX]; /* owned */
    int count;
};

/*
 * Points each `*slots[i]` at an owned copy of itself (NULL stays NULL).
 * Returns 0, or -1 when out of memory or slots; obx_owned_strings_fini()
 * frees what was copied either way.
 */
int obx_owned_strings_adopt(struct obx_owned_strings *owned, const char **const *slots, size_t n);

void obx_owned_strings_fini(struct obx_owned_strings *owned);

/* One bounded number of an options struct, for obx_check_ranges(). */
struct obx_range {
    const char *name;
    long long value, min, max;
};

/* OUTBOX_EINVAL naming the first value outside its range, else OUTBOX_OK. */
outbox_status obx_check_ranges(const struct obx_range *ranges, size_t count, outbox_error *err);

/* "host-pid" into `out`: the default replica name. */
void obx_default_replica_name(char *out, size_t cap);

#endif
