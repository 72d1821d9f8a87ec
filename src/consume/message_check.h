/* SPDX-License-Identifier: MIT */
/*
 * message_check.h - what a received message must be before any handler
 * may see it. Anyone with publish rights on the stream's subjects can put
 * a message there, so the consumer checks that each one is what a relay
 * sends: headers within the relay's budget, a valid v1 envelope as the
 * body, the envelope's own id as Nats-Msg-Id, and the subject the
 * envelope's route gives. A message that fails is refused: no handler
 * runs, it is terminated, and the reason is logged and counted.
 *
 * Pure: no I/O, no server; the same verdict for the same message.
 */
#ifndef OBX_MESSAGE_CHECK_H
#define OBX_MESSAGE_CHECK_H

#include "envelope/envelope.h"
#include "feed/feed.h"
#include "outbox/outbox.h"

/* Which check refused a message; the names are what the log says (check=...). */
enum obx_refusal {
    OBX_ACCEPTED = 0,
    OBX_REFUSED_HEADERS,  /* the header block is larger than a relay ever sends */
    OBX_REFUSED_ENVELOPE, /* the body is not a valid v1 envelope (empty, not JSON, a rule) */
    OBX_REFUSED_MSG_ID,   /* Nats-Msg-Id missing, not an event id, or another event's */
    OBX_REFUSED_SUBJECT,  /* the subject is not the one the envelope's route gives */
};

/* "headers", "envelope", "msg_id", "subject" ("" for OBX_ACCEPTED). */
const char *obx_refusal_name(enum obx_refusal r);

/*
 * Checks message `m` for a consumer of subjects under `prefix`. Accepted:
 * `env` holds the parsed envelope (obx_envelope_fini() it). Refused: `env`
 * is left empty and `why` holds the reason, naming the value at fault.
 * The accepted message ids are the envelope's id, and
 * "<id>:requeue:<n>" (outboxctl dead requeue publishes an event again so).
 */
enum obx_refusal obx_message_check(const struct obx_feed_msg *m, const char *prefix,
                                   struct obx_envelope *env, outbox_error *why);

#endif
