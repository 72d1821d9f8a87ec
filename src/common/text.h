/* SPDX-License-Identifier: MIT */
/*
 * text.h - byte-level text checks shared by every validator.
 *
 * Error messages quote values the way PostgreSQL's to_jsonb(text)::text
 * does, so the C writer and outbox.enqueue() word the same error alike,
 * and a CR or LF in a bad value cannot break a log line.
 */
#ifndef OBX_TEXT_H
#define OBX_TEXT_H

#include <stddef.h>

#include "buf.h"

/* True if `s[0..len)` is well-formed UTF-8 (no overlongs, no surrogates). */
int obx_utf8_valid(const char *s, size_t len);

/* True if `s` holds a byte 0x01-0x1f or 0x7f. */
int obx_has_control(const char *s);

/* Appends `s` as a JSON string literal, escaped like PostgreSQL escapes it. */
void obx_json_quote(struct obx_buf *b, const char *s, size_t len);

/*
 * Writes `s` JSON-quoted into `out` (cap bytes, always terminated), cut at
 * about 120 bytes with "..." so a huge value cannot crowd out a message.
 */
void obx_quote_for_message(const char *s, char *out, size_t cap);

#endif
