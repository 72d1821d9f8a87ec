/* SPDX-License-Identifier: MIT */
/*
 * id_set.c - a sorted multiset of event ids for the relay checker.
 */
#include "id_set.h"

#include <stdlib.h>
#include <string.h>

void
id_set_init(struct id_set *s)
{
    memset(s, 0, sizeof(*s));
}

void
id_set_fini(struct id_set *s)
{
    free(s->ids);
    memset(s, 0, sizeof(*s));
}

int
id_set_add(struct id_set *s, const char *id)
{
    size_t len = strnlen(id, ID_TEXT_CAP - 1);

    if (s->count == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        char(*grown)[ID_TEXT_CAP] = realloc(s->ids, cap * sizeof(*grown));

        if (grown == NULL) {
            return -1;
        }
        s->ids = grown;
        s->cap = cap;
    }
    memcpy(s->ids[s->count], id, len);
    s->ids[s->count][len] = '\0';
    s->count++;
    return 0;
}

static int
compare_ids(const void *a, const void *b)
{
    return strcmp(a, b);
}

void
id_set_sort(struct id_set *s)
{
    if (s->count > 1) {
        qsort(s->ids, s->count, sizeof(*s->ids), compare_ids);
    }
}

int
id_set_has(const struct id_set *s, const char *id)
{
    char key[ID_TEXT_CAP];
    size_t len = strnlen(id, ID_TEXT_CAP - 1);

    if (s->count == 0) {
        return 0;
    }
    memcpy(key, id, len);
    key[len] = '\0';
    return bsearch(key, s->ids, s->count, sizeof(*s->ids), compare_ids) != NULL;
}

size_t
id_set_dups(const struct id_set *s, char example[ID_TEXT_CAP])
{
    size_t dups = 0;

    for (size_t i = 1; i < s->count; i++) {
        if (strcmp(s->ids[i], s->ids[i - 1]) == 0) {
            if (dups++ == 0 && example != NULL) {
                memcpy(example, s->ids[i], ID_TEXT_CAP);
            }
        }
    }
    return dups;
}
