/* SPDX-License-Identifier: MIT */
/*
 * writer_internal.h - what the writer's files share with each other.
 */
#ifndef OBX_WRITER_INTERNAL_H
#define OBX_WRITER_INTERNAL_H

#include <stddef.h>

#include "outbox/outbox.h"

/*
 * The envelope of a complete event, serialized and cached in the event;
 * `*json` is valid until the event changes. Does not reset `err`.
 */
outbox_status obx_event_envelope(outbox_event *ev, const char **json, size_t *len,
                                 outbox_error *err);

/* The row's columns, in enqueue_one.sql's order ($1..$6); borrowed from the event. */
void obx_event_columns(const outbox_event *ev, const char *out[6]);

/*
 * The first migration that carries set_ordering() (0014): a new schema
 * migrated at least this far starts with ordering on.
 */
#define OBX_ORDERING_FIRST_VERSION 14

/*
 * outbox_migrate() that stops after migration `last_version`: the tests
 * build a schema as an older release left it, then upgrade it.
 */
outbox_status obx_migrate_through(PGconn *conn, const char *schema, int last_version, int *applied,
                                  outbox_error *err);

#endif
