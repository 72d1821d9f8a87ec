/* SPDX-License-Identifier: MIT */
/*
 * metrics.h - Prometheus text for a daemon's counters, and running a
 * daemon job with its HTTP surface. No Prometheus C client is packaged on
 * Debian 12, so the exposition format is written here.
 */
#ifndef OBX_METRICS_H
#define OBX_METRICS_H

#include <stddef.h>

#include "common/buf.h"
#include "config/settings.h"
#include "daemon.h"
#include "http.h"

/* One counter of a worker: its library id, name and help. */
struct obx_metric_def {
    int id;           /* outbox_relay_stat_id or outbox_consumer_stat_id */
    const char *name; /* without prefix and _total */
    const char *help;
};

/* Reads counter `id` of the worker `ctx`. */
typedef unsigned long long (*obx_metric_read_fn)(void *ctx, int id);

/* What the daemon serves of its worker: the counters, and the two gauges readiness needs. */
struct obx_worker_view {
    const char *prefix;                    /* outbox_<prefix>_<name>_total: "relay", "consumer" */
    const struct obx_metric_def *counters; /* static */
    size_t counter_count;
    int database_up, broker_up; /* the ids of the worker's two up gauges */
    obx_metric_read_fn read;
    void *ctx; /* the worker */
};

/* The HTTP handlers of a view: /metrics from its counters, /readyz while both gauges read 1. */
struct obx_http_handlers obx_worker_view_handlers(const struct obx_worker_view *view);

/*
 * Serves `handlers` on OUTBOX_HTTP_ADDR (if set) and runs `job` until it
 * ends or a signal stops it. Returns the exit code (2: bad address).
 */
int obx_serve(const struct obx_daemon_job *job, const struct obx_http_handlers *handlers,
              const struct obx_config *cfg);

#endif
