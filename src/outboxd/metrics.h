/* SPDX-License-Identifier: MIT */
/*
 * metrics.h - Prometheus text for a daemon's counters, and running a
 * daemon job with its HTTP surface. No Prometheus C client is packaged on
 * Debian 12, so the exposition format is written here.
 */
#ifndef OBX_METRICS_H
#define OBX_METRICS_H

#include <stddef.h>

#include "buf.h"
#include "daemon.h"
#include "http.h"
#include "settings.h"

struct obx_metric {
    const char *name; /* without prefix and _total */
    const char *help;
    unsigned long long value;
};

/* Appends outbox_<prefix>_<name>_total counters. */
void obx_metrics_counters(struct obx_buf *out, const char *prefix, const struct obx_metric *m,
                          size_t count);

/* Appends the outbox_database_up and outbox_broker_up gauges. */
void obx_metrics_up(struct obx_buf *out, int database_up, int broker_up);

/*
 * Serves `handlers` on OUTBOX_HTTP_ADDR (if set) and runs `job` until it
 * ends or a signal stops it. Returns the exit code (2: bad address).
 */
int obx_serve(const struct obx_daemon_job *job, const struct obx_http_handlers *handlers,
              const struct obx_config *cfg);

#endif
