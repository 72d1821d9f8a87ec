/* SPDX-License-Identifier: MIT */
/*
 * log.h - the library never writes to stdout or stderr. It hands one
 * formatted line to the logger the program installed; by default, nowhere.
 */
#ifndef OBX_LOG_H
#define OBX_LOG_H

#include "outbox/worker.h"

extern outbox_log_level obx_log_min_level;
extern int obx_log_enabled;

void obx_log_write(outbox_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * Skips formatting entirely when nobody listens or the level is filtered
 * out. Write a constant message first, then key=value fields.
 */
#define obx_log(level, ...)                                    \
    do {                                                       \
        if (obx_log_enabled && (level) >= obx_log_min_level) { \
            obx_log_write((level), __VA_ARGS__);               \
        }                                                      \
    } while (0)

#endif
