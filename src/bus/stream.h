/* SPDX-License-Identifier: MIT */
/*
 * stream.h - makes sure the JetStream stream the relay publishes into
 * exists, with the settings DESIGN.md asks for.
 *
 * A missing stream is created: file storage, subjects {prefix}.>, limits
 * retention, deny_delete, deny_purge, `replicas` replicas. An existing stream is
 * left alone except for duplicate_window, which is changed in place with
 * every other field preserved. What cannot be changed is logged with the
 * nats CLI command that would change it, and the caller keeps running.
 */
#ifndef OBX_STREAM_H
#define OBX_STREAM_H

#include <stdint.h>

#include "outbox/outbox.h"

struct obx_bus;

struct obx_stream_options {
    const char *name;                 /* "EVENTS" */
    const char *subjects_prefix;      /* "events": the stream captures "events.>" */
    int64_t max_age_seconds;          /* 7 days; 0: unlimited */
    int64_t max_bytes;                /* -1: unlimited */
    int64_t duplicate_window_seconds; /* 3600 */
    int replicas;                     /* num_replicas of a stream created here: 1; 3 on a cluster */
    int check_only;                   /* 0; 1: create if missing, never update (the consumers:
                                       * the relay owns duplicate_window) */
};

void obx_stream_options_init(struct obx_stream_options *o);

/*
 * Creates or checks the stream through the bus's connection (bus thread).
 * Returns OUTBOX_EUNAVAILABLE while NATS or JetStream is down (retry
 * later), OUTBOX_EINVAL for bad options or a stream the server will not
 * create as asked (its subjects overlap another stream's: error 10065),
 * OUTBOX_OK otherwise, including when settings differ and were only logged.
 */
outbox_status obx_stream_ensure(struct obx_bus *bus, const struct obx_stream_options *o,
                                outbox_error *err);

#endif
