/* SPDX-License-Identifier: MIT */
/*
 * logfmt.h - log lines whose values cannot forge fields or records.
 *
 * A log line is a constant message, then key=value fields. Values come
 * from anywhere: a writer's payload, a handler's stderr, a server's error.
 * The formatter escapes every %s argument the way logfmt reads it back,
 * so no value can end its field early, add a key, or start a new line:
 *
 *   key=%s      a bare value: written as is when it is a plain word, else
 *               quoted, with " and \ escaped and control bytes as \n, \t,
 *               \r or \u00XX;
 *   key="%s"    (or any %s inside a quoted part of the format): escaped
 *               the same way, without quotes of its own;
 *   other %s    message words chosen by the code: quoted only if they hold
 *               '=', '"', '\' or a control byte.
 *
 * Every other conversion is formatted by snprintf. Pure: no I/O.
 */
#ifndef OBX_LOGFMT_H
#define OBX_LOGFMT_H

#include <stdarg.h>
#include <stddef.h>

/*
 * Formats into `out` (cap bytes, always terminated; cap >= 1). A line too
 * long is cut between fields' characters, never inside an escape, and a
 * quoted value cut short is still closed. Returns the length written.
 */
size_t obx_logfmt_vformat(char *out, size_t cap, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
size_t obx_logfmt_format(char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Appends `value` as a bare logfmt value (quoted when not a plain word); returns its length. */
size_t obx_logfmt_value(char *out, size_t cap, const char *value);

/*
 * True if the logfmt `line` has a field named `key` (key=..., outside any
 * quoted value): a quoted value that holds " key=" does not count.
 */
int obx_logfmt_has_key(const char *line, const char *key);

#endif
