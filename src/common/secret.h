/* SPDX-License-Identifier: MIT */
/*
 * secret.h - secrets left out of every text we print.
 *
 * A value echoed in an error or a log line (a setting, a fleet file line,
 * a libpq or nats.c message about one) goes through obx_mask_secrets()
 * first. What counts as a secret, wherever it appears in the text:
 *
 *   - a URL's password or token: the user information becomes user:***@
 *     or, for a NATS token, ***@ (a postgres:// user name alone is kept:
 *     it is no secret);
 *   - a password=, sslpassword=, token= or secret= value, in a libpq
 *     key=value string ('quoted' too) or a URL query: password=***;
 *   - an NATS nkey seed (SU..., 58 characters) or a JWT (eyJ...), as in a
 *     .creds file: ***.
 *
 * Pure text work: no I/O, unit-tested (tests/unit/common/test_secret.c).
 */
#ifndef OBX_SECRET_H
#define OBX_SECRET_H

#include <stddef.h>

/* `text` with its secrets replaced by ***, into `out` (cap bytes, always terminated). */
void obx_mask_secrets(const char *text, char *out, size_t cap);

/*
 * A message about `input` (libpq's "missing "=" after "..."", nats.c's
 * reasons) made safe to print: its secrets masked, every "quoted" part
 * that shows text of `input` hidden by obx_mask_secrets() replaced by
 * "***", and control characters written as \n, \r, \t or \xNN so that the
 * message stays one line.
 */
void obx_mask_echo(const char *message, const char *input, char *out, size_t cap);

/*
 * `value` masked and quoted for a message, JSON-style ("..." with control
 * characters escaped), cut at about 120 bytes: what every setting's error
 * shows of its value.
 */
void obx_mask_quote(const char *value, char *out, size_t cap);

#endif
