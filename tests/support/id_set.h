/* SPDX-License-Identifier: MIT */
/*
 * id_set.h - a sorted multiset of event ids (canonical UUID text), for the
 * checker of FAULTS.md §1: the committed ids, the ids read from a stream,
 * the quarantined and the dead-lettered ones, compared after quiescence.
 * Pure: no I/O.
 */
#ifndef OBX_TEST_ID_SET_H
#define OBX_TEST_ID_SET_H

#include <stddef.h>

enum { ID_TEXT_CAP = 37 }; /* 36 characters of a UUID and the NUL */

struct id_set {
    char (*ids)[ID_TEXT_CAP]; /* owned; sorted once id_set_sort() ran */
    size_t count;
    size_t cap;
};

void id_set_init(struct id_set *s);
void id_set_fini(struct id_set *s);

/* Adds a copy of `id` (cut at 36 bytes); -1 when out of memory. Keeps duplicates. */
int id_set_add(struct id_set *s, const char *id);

/* Sorts the ids; call it after the last id_set_add() and before the queries below. */
void id_set_sort(struct id_set *s);

/* 1 if `id` is in the sorted set. */
int id_set_has(const struct id_set *s, const char *id);

/* Entries equal to the one before them in the sorted set: |S| - |distinct S|. */
size_t id_set_dups(const struct id_set *s, char example[ID_TEXT_CAP]);

#endif
