/* SPDX-License-Identifier: MIT */
/*
 * stream_reader_nats.h - what a JetStream stream really holds, read from
 * sequence 1 through an ephemeral ordered consumer: the checker's S
 * (FAULTS.md §1). It trusts no component's callbacks, only the server.
 */
#ifndef OBX_TEST_STREAM_READER_NATS_H
#define OBX_TEST_STREAM_READER_NATS_H

#include <stddef.h>
#include <stdint.h>

#include "id_set.h"

/*
 * Adds the Nats-Msg-Id of every message of `stream` (an empty string for a
 * message without one) to `ids`, in stream order. Returns 0, or -1 with
 * the reason in `err` (no server, no such stream, a message missing).
 */
int stream_read_ids(const char *nats_url, const char *stream, struct id_set *ids, char *err,
                    size_t cap);

/* Messages in `stream` now, or -1 with the reason in `err`. */
int64_t stream_message_count(const char *nats_url, const char *stream, char *err, size_t cap);

#endif
