/* SPDX-License-Identifier: MIT */
/*
 * subject.h - NATS subject rules: {prefix}.{aggregate_type}.{event_type}.
 *
 * Tokens are [A-Za-z0-9_-]+, so no wildcard (* >), whitespace or control
 * byte can reach the broker's protocol. aggregate_type is one token,
 * event_type one or more joined by dots and never starting with the
 * aggregate type (no movie.movie.x dead subjects). The route is at most
 * OUTBOX_MAX_ROUTE_BYTES and the prefix OUTBOX_MAX_PREFIX_BYTES, so every
 * valid event fits any valid prefix within NATS's 255 bytes.
 */
#ifndef OBX_SUBJECT_H
#define OBX_SUBJECT_H

#include <stddef.h>

#include "outbox/outbox.h"

#define OBX_SUBJECT_CAP 256 /* 255 bytes and the terminator */

/* True if `s[0..len)` is one non-empty token of [A-Za-z0-9_-]. */
int obx_token_valid(const char *s, size_t len);

/* True if `s` is one or more tokens joined by single dots. */
int obx_dotted_tokens_valid(const char *s);

/* Checks aggregate_type and event_type; the message names field and value. */
outbox_status obx_route_check(const char *aggregate_type, const char *event_type,
                              outbox_error *err);

/* Checks a configured subject prefix (OUTBOX_SUBJECT_PREFIX). */
outbox_status obx_subject_prefix_check(const char *prefix, outbox_error *err);

/* Writes the subject into `out` (OBX_SUBJECT_CAP bytes) after checking all three parts. */
outbox_status obx_subject_build(const char *prefix, const char *aggregate_type,
                                const char *event_type, char *out, outbox_error *err);

/*
 * True if `subject` matches `filter` the way NATS matches subscriptions:
 * tokens split on '.', `*` matches exactly one token, `>` (last token
 * only) one or more. A filter that is not well formed matches nothing.
 */
int obx_subject_matches(const char *filter, const char *subject);

/*
 * True if `filter` matches every subject that starts with the first
 * `prefix_len` bytes of `prefix` followed by one or more tokens: a handler
 * with such a filter for {prefix}.{aggregate_type} is given all of that
 * aggregate type's events, whatever their event_type.
 */
int obx_subject_filter_covers(const char *filter, const char *prefix, size_t prefix_len);

/* Checks a handler's subject filter (tokens, `*`, a final `>`). */
outbox_status obx_subject_filter_check(const char *filter, outbox_error *err);

#endif
