/* SPDX-License-Identifier: MIT */
/*
 * raw_publish.h - the relay benchmark's baseline: the same JetStream work
 * the relay does (async publish with a unique Nats-Msg-Id each, acks
 * awaited through the same window), with no database and no pgoutbox
 * code in between, so relay results can be read as a ratio of it.
 */
#ifndef OBX_RAW_PUBLISH_H
#define OBX_RAW_PUBLISH_H

#include <stddef.h>

#include "outbox/outbox.h"

/*
 * Publishes `count` messages of `body_bytes` to "{subject_prefix}.bench.raw"
 * with at most `window` unacked, expecting acks from `stream`, which must
 * exist and capture that subject. Writes the rate, from the first publish
 * to the last ack, into *events_per_s. Returns OUTBOX_EUNAVAILABLE if NATS
 * cannot be reached or any message is not acked positively, OUTBOX_EINVAL
 * for bad arguments.
 */
outbox_status obx_raw_publish_rate(const char *url, const char *stream, const char *subject_prefix,
                                   size_t count, size_t body_bytes, int window,
                                   double *events_per_s, outbox_error *err);

#endif
