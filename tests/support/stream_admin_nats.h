/* SPDX-License-Identifier: MIT */
/*
 * stream_admin_nats.h - what an operator does to streams behind the relays'
 * backs (FAULTS.md T22): delete one, or create another that captures the
 * same subjects.
 */
#ifndef OBX_TEST_STREAM_ADMIN_NATS_H
#define OBX_TEST_STREAM_ADMIN_NATS_H

#include <stddef.h>

/* Deletes `stream`. Returns 0, or -1 with the reason in `err`. */
int stream_admin_delete(const char *nats_url, const char *stream, char *err, size_t cap);

/* Creates file-stored `stream` capturing `subjects` (e.g. "evt.>"). 0, or -1 with the reason. */
int stream_admin_create(const char *nats_url, const char *stream, const char *subjects, char *err,
                        size_t cap);

#endif
