/* SPDX-License-Identifier: MIT */
/*
 * stream_audit.h - what actually reached a JetStream stream: every
 * Nats-Msg-Id read back from sequence 1, so the demo (and anyone checking
 * a run) counts lost and duplicated events without trusting the relays.
 */
#ifndef OBX_STREAM_AUDIT_H
#define OBX_STREAM_AUDIT_H

#include <stddef.h>

/* A set of event ids (Nats-Msg-Id values), with how often each was seen. */
struct obx_id_set;

struct obx_id_set *obx_id_set_new(void);
void obx_id_set_free(struct obx_id_set *set);

/* Adds `id`; returns how many times it has been added, this time included. */
unsigned obx_id_set_add(struct obx_id_set *set, const char *id);

/* How many times `id` was added (0: never). */
unsigned obx_id_set_count(const struct obx_id_set *set, const char *id);

/* Distinct ids, and all additions. */
size_t obx_id_set_distinct(const struct obx_id_set *set);
size_t obx_id_set_total(const struct obx_id_set *set);

/*
 * Reads every message of `stream` on `subjects` (e.g. "events.>") into
 * `ids` (by Nats-Msg-Id). Returns 0, or -1 with the reason in `err`.
 */
int obx_stream_audit(const char *nats_url, const char *stream, const char *subjects,
                     struct obx_id_set *ids, char *err, size_t err_len);

/* The stream's message count, or -1 if it cannot be read. */
long long obx_stream_message_count(const char *nats_url, const char *stream);

#endif
