/* SPDX-License-Identifier: MIT */
/*
 * owned_strings.h - copying the string fields of an options struct, so
 * the caller's strings need only live until the _new() call returns.
 */
#ifndef OBX_OWNED_STRINGS_H
#define OBX_OWNED_STRINGS_H

#include <stddef.h>

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

/* "host-pid" into `out`: the default replica name. */
void obx_default_replica_name(char *out, size_t cap);

#endif
