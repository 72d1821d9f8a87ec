/* SPDX-License-Identifier: MIT */
/*
 * id_set.c - an open-addressing hash set of event ids with counts.
 *
 * Ids are UUID text; the table doubles when half full, so lookups stay
 * short for the millions of ids a long demo or soak run produces.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stream_audit.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { ID_CAP = 40 }; /* 36 bytes of UUID text and room to spare */

struct slot {
    char id[ID_CAP];
    unsigned count; /* 0: empty */
};

struct obx_id_set {
    struct slot *slots;
    size_t cap; /* a power of two */
    size_t distinct;
    size_t total;
};

static uint64_t
hash_id(const char *id)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */

    for (; *id; id++) {
        h = (h ^ (unsigned char)*id) * 1099511628211ULL;
    }
    return h;
}

static struct slot *
find(struct slot *slots, size_t cap, const char *id)
{
    size_t i = (size_t)hash_id(id) & (cap - 1);

    while (slots[i].count != 0 && strncmp(slots[i].id, id, ID_CAP) != 0) {
        i = (i + 1) & (cap - 1);
    }
    return &slots[i];
}

static int
grow(struct obx_id_set *set)
{
    size_t cap = set->cap * 2;
    struct slot *slots = calloc(cap, sizeof(*slots));

    if (slots == NULL) {
        return -1;
    }
    for (size_t i = 0; i < set->cap; i++) {
        if (set->slots[i].count != 0) {
            *find(slots, cap, set->slots[i].id) = set->slots[i];
        }
    }
    free(set->slots);
    set->slots = slots;
    set->cap = cap;
    return 0;
}

struct obx_id_set *
obx_id_set_new(void)
{
    struct obx_id_set *set = calloc(1, sizeof(*set));

    if (set != NULL) {
        set->cap = 1024;
        set->slots = calloc(set->cap, sizeof(*set->slots));
    }
    if (set != NULL && set->slots == NULL) {
        free(set);
        set = NULL;
    }
    return set;
}

void
obx_id_set_free(struct obx_id_set *set)
{
    if (set != NULL) {
        free(set->slots);
        free(set);
    }
}

unsigned
obx_id_set_add(struct obx_id_set *set, const char *id)
{
    struct slot *s;

    if ((set->distinct + 1) * 2 > set->cap && grow(set) != 0) {
        return 0;
    }
    s = find(set->slots, set->cap, id);
    if (s->count == 0) {
        memset(s->id, 0, ID_CAP);
        memcpy(s->id, id, strnlen(id, ID_CAP - 1));
        set->distinct++;
    }
    set->total++;
    return ++s->count;
}

unsigned
obx_id_set_count(const struct obx_id_set *set, const char *id)
{
    return find(set->slots, set->cap, id)->count;
}

size_t
obx_id_set_distinct(const struct obx_id_set *set)
{
    return set->distinct;
}

size_t
obx_id_set_total(const struct obx_id_set *set)
{
    return set->total;
}
