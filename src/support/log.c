/* SPDX-License-Identifier: MIT */
/*
 * log.c - the process-wide logger hook.
 *
 * Installed once at start-up by the program, read by every thread after;
 * a line longer than the buffer is cut rather than allocated.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>

#include "logfmt.h"

#include "common/banned.h" /* last: poisons unsafe functions */

outbox_log_level obx_log_min_level = OUTBOX_LOG_ERROR;
int obx_log_enabled = 0;

static outbox_log_fn log_fn;
static void *log_ctx;

void
outbox_set_logger(outbox_log_fn fn, void *ctx, outbox_log_level min_level)
{
    log_fn = fn;
    log_ctx = ctx;
    obx_log_min_level = min_level;
    obx_log_enabled = fn != NULL;
}

void
obx_log_write(outbox_log_level level, const char *fmt, ...)
{
    char line[2048];
    va_list ap;

    if (log_fn == NULL) {
        return;
    }
    va_start(ap, fmt);
    obx_logfmt_vformat(line, sizeof(line), fmt, ap);
    va_end(ap);
    log_fn(log_ctx, level, line);
}

void
obx_log_write_line(outbox_log_level level, const char *line)
{
    if (log_fn != NULL) {
        log_fn(log_ctx, level, line);
    }
}
