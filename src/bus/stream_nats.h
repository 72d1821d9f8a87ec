/* SPDX-License-Identifier: MIT */
/*
 * stream_nats.h - obx_stream_ensure() for callers that hold their own
 * nats.c connection instead of a bus (the JetStream feed).
 */
#ifndef OBX_STREAM_NATS_H
#define OBX_STREAM_NATS_H

#include <nats/nats.h>

#include "stream.h"

/*
 * The same as obx_stream_ensure(), through `nc` and `js` (borrowed; the
 * caller's thread). OUTBOX_EUNAVAILABLE unless `nc` is connected.
 */
outbox_status obx_stream_ensure_nats(natsConnection *nc, jsCtx *js,
                                     const struct obx_stream_options *o, outbox_error *err);

#endif
