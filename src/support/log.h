/* SPDX-License-Identifier: MIT */
/*
 * log.h - the library never writes to stdout or stderr. It hands one
 * formatted line to the logger the program installed; by default, nowhere.
 */
#ifndef OBX_LOG_H
#define OBX_LOG_H

#include "logfmt.h"
#include "outbox/worker.h"

extern outbox_log_level obx_log_min_level;
extern int obx_log_enabled;

void obx_log_write(outbox_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Hands on `line` as it is: only a line obx_logfmt_format built. */
void obx_log_write_line(outbox_log_level level, const char *line);

/*
 * Skips formatting entirely when nobody listens or the level is filtered
 * out. Write a constant message first, then key=value fields: every %s is
 * escaped for its place (logfmt.h), so write key=%s, never build a line
 * or a value with snprintf first.
 */
#define obx_log(level, ...)                                    \
    do {                                                       \
        if (obx_log_enabled && (level) >= obx_log_min_level) { \
            obx_log_write((level), __VA_ARGS__);               \
        }                                                      \
    } while (0)

#endif
