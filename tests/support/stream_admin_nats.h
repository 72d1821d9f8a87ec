/* SPDX-License-Identifier: MIT */
/*
 * stream_admin_nats.h - what an operator does to streams behind the relays'
 * backs (FAULTS.md T22): delete one, or create another that captures the
 * same subjects.
 */
#ifndef OBX_TEST_STREAM_ADMIN_NATS_H
#define OBX_TEST_STREAM_ADMIN_NATS_H

#include <stddef.h>

#include <nats/nats.h>

/* Deletes `stream`. Returns 0, or -1 with the reason in `err`. */
int stream_admin_delete(const char *nats_url, const char *stream, char *err, size_t cap);

/* Creates file-stored `stream` capturing `subjects` (e.g. "evt.>"). 0, or -1 with the reason. */
int stream_admin_create(const char *nats_url, const char *stream, const char *subjects, char *err,
                        size_t cap);

/* A stream as an operator would make it, for tests that need settings the relays do not pick. */
struct stream_admin_spec {
    const char *name;
    const char *subjects;        /* one filter, e.g. "evt.>" */
    long long duplicates_s;      /* duplicate window; 0: the server's default */
    long long max_age_s;         /* 0: unlimited */
    int max_msg_size;            /* 0: no limit */
    jsRetentionPolicy retention; /* js_LimitsPolicy unless set */
    int update;                  /* 1: change an existing stream instead of adding one */
};

/* Adds (or updates) a file-stored stream from `spec`. 0, or -1 with the reason in `err`. */
int stream_admin_put(const char *nats_url, const struct stream_admin_spec *spec, char *err,
                     size_t cap);

#endif
