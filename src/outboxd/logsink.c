/* SPDX-License-Identifier: MIT */
/*
 * logsink.c - writes library log lines to stderr with a UTC timestamp,
 * one line each, with any secret a line quotes masked.
 */
#include "logsink.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/secret.h"
#include "fleet/fleet.h"
#include "outbox/worker.h"
#include "support/logfmt.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *
level_name(outbox_log_level level)
{
    switch (level) {
    case OUTBOX_LOG_DEBUG:
        return "debug";
    case OUTBOX_LOG_INFO:
        return "info";
    case OUTBOX_LOG_WARN:
        return "warn";
    case OUTBOX_LOG_ERROR:
        break;
    }
    return "error";
}

static void
write_line(void *ctx, outbox_log_level level, const char *line)
{
    struct timespec now;
    struct tm tm;
    char stamp[40], clean[1400];
    /* A fleet's threads serve one database each: every line they write names it, unless
     * it has a database field of its own (a value holding " database=" is quoted, and
     * is no field). */
    const char *database = obx_fleet_thread_database();
    char label[300] = "";

    (void)ctx;
    /* Last line of defence: whatever a line quotes, no secret and no line break gets out. */
    obx_mask_echo(line, NULL, clean, sizeof(clean));
    if (database != NULL && !obx_logfmt_has_key(clean, "database")) {
        obx_logfmt_format(label, sizeof(label), " database=%s", database);
    }
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    pthread_mutex_lock(&write_lock);
    fprintf(stderr, "%s.%03ldZ level=%s %s%s\n", stamp, now.tv_nsec / 1000000, level_name(level),
            clean, label);
    fflush(stderr);
    pthread_mutex_unlock(&write_lock);
}

void
obx_logsink_install(outbox_log_level level)
{
    outbox_set_logger(write_line, NULL, level);
}
