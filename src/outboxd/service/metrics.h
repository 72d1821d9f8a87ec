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

/*
 * One metric of a worker: its library id, its name and help. A counter's
 * name is without the prefix and _total (outbox_<prefix>_<name>_total); a
 * gauge's and a histogram's is the whole name, unit included
 * (outbox_relay_oldest_due_age_seconds).
 */
struct obx_metric_def {
    int id; /* an outbox_*_stat_id or outbox_*_histogram_id */
    const char *name;
    const char *help;
};

/* Reads counter or gauge `id` of the worker `ctx`. */
typedef unsigned long long (*obx_metric_read_fn)(void *ctx, int id);

/* Reads histogram `id` as outbox_relay_histogram() does. */
typedef size_t (*obx_histogram_read_fn)(void *ctx, int id, unsigned long long *counts, size_t cap,
                                        double *sum_seconds);

/* What the daemon serves of its worker: its metrics, and the two gauges readiness needs. */
struct obx_worker_view {
    const char *prefix;                    /* outbox_<prefix>_<name>_total: "relay", "consumer" */
    const struct obx_metric_def *counters; /* static */
    size_t counter_count;
    const struct obx_metric_def *gauges; /* static */
    size_t gauge_count;
    const struct obx_metric_def *histograms; /* static */
    size_t histogram_count;
    int database_up, broker_up; /* the ids of the worker's two up gauges */
    obx_metric_read_fn read;
    obx_histogram_read_fn read_histogram;
    /* The command's own lines (labelled, or derived from its settings); may be NULL. */
    void (*extra)(void *extra_ctx, struct obx_buf *out);
    void *extra_ctx;
    void *ctx; /* the worker */
};

/* Appends one gauge line with its HELP and TYPE. */
void obx_metrics_gauge(struct obx_buf *out, const char *name, const char *help, long long value);

/* The HTTP handlers of a view: /metrics from its counters, /readyz while both gauges read 1. */
struct obx_http_handlers obx_worker_view_handlers(const struct obx_worker_view *view);

/*
 * Serves `handlers` on OUTBOX_HTTP_ADDR (if set) and runs `job` until it
 * ends or a signal stops it. Returns the exit code (2: bad address).
 */
int obx_serve(const struct obx_daemon_job *job, const struct obx_http_handlers *handlers,
              const struct obx_config *cfg);

#endif
