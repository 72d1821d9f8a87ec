/* SPDX-License-Identifier: MIT */
/*
 * metrics.c - counters and gauges in the Prometheus text format.
 */
#include "metrics.h"

#include <math.h>
#include <stdio.h>

#include "outbox/worker.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static void
append_counters(struct obx_buf *out, const struct obx_worker_view *v)
{
    const char *prefix = v->prefix;
    const struct obx_metric_def *m = v->counters;

    for (size_t i = 0; i < v->counter_count; i++) {
        obx_buf_appendf(out,
                        "# HELP outbox_%s_%s_total %s.\n# TYPE outbox_%s_%s_total counter\n"
                        "outbox_%s_%s_total %llu\n",
                        prefix, m[i].name, m[i].help, prefix, m[i].name, prefix, m[i].name,
                        v->read(v->ctx, m[i].id));
    }
}

void
obx_metrics_gauge(struct obx_buf *out, const char *name, const char *help, long long value)
{
    obx_buf_appendf(out, "# HELP %s %s.\n# TYPE %s gauge\n%s %lld\n", name, help, name, name,
                    value);
}

static void
append_gauges(struct obx_buf *out, const struct obx_worker_view *v)
{
    for (size_t i = 0; i < v->gauge_count; i++) {
        obx_metrics_gauge(out, v->gauges[i].name, v->gauges[i].help,
                          (long long)v->read(v->ctx, v->gauges[i].id));
    }
}

/* Prometheus histograms: cumulative buckets by upper bound, then _sum and _count. */
static void
append_histograms(struct obx_buf *out, const struct obx_worker_view *v)
{
    unsigned long long counts[32];
    const double *bounds;
    size_t buckets = outbox_histogram_bounds(&bounds);

    for (size_t i = 0; i < v->histogram_count; i++) {
        const struct obx_metric_def *m = &v->histograms[i];
        double sum = 0;
        size_t n =
            v->read_histogram(v->ctx, m->id, counts, sizeof(counts) / sizeof(counts[0]), &sum);

        obx_buf_appendf(out, "# HELP %s %s.\n# TYPE %s histogram\n", m->name, m->help, m->name);
        for (size_t b = 0; b < n && b < buckets; b++) {
            if (isinf(bounds[b])) {
                obx_buf_appendf(out, "%s_bucket{le=\"+Inf\"} %llu\n", m->name, counts[b]);
            } else {
                obx_buf_appendf(out, "%s_bucket{le=\"%g\"} %llu\n", m->name, bounds[b], counts[b]);
            }
        }
        obx_buf_appendf(out, "%s_sum %.6f\n%s_count %llu\n", m->name, sum, m->name,
                        n > 0 ? counts[n - 1] : 0ULL);
    }
}

static void
append_up(struct obx_buf *out, int database_up, int broker_up)
{
    obx_buf_appendf(out,
                    "# HELP outbox_database_up 1 while the database answers.\n"
                    "# TYPE outbox_database_up gauge\noutbox_database_up %d\n"
                    "# HELP outbox_broker_up 1 while the broker (or the feed) answers.\n"
                    "# TYPE outbox_broker_up gauge\noutbox_broker_up %d\n",
                    database_up, broker_up);
}

static void
view_metrics(void *ctx, struct obx_buf *out)
{
    const struct obx_worker_view *v = ctx;

    append_counters(out, v);
    append_gauges(out, v);
    append_histograms(out, v);
    append_up(out, (int)v->read(v->ctx, v->database_up), (int)v->read(v->ctx, v->broker_up));
    if (v->extra != NULL) {
        v->extra(v->extra_ctx, out);
    }
}

static int
view_ready(void *ctx)
{
    const struct obx_worker_view *v = ctx;

    return v->read(v->ctx, v->database_up) && v->read(v->ctx, v->broker_up);
}

struct obx_http_handlers
obx_worker_view_handlers(const struct obx_worker_view *view)
{
    return (struct obx_http_handlers){
        .ctx = (void *)view, .metrics = view_metrics, .ready = view_ready};
}

int
obx_serve(const struct obx_daemon_job *job, const struct obx_http_handlers *handlers,
          const struct obx_config *cfg)
{
    struct obx_http *http = NULL;
    char msg[256];
    sigset_t stop_signals;
    struct obx_daemon_job run;
    int code;

    /* Before the HTTP server's threads start: a stop signal must reach only the main
     * thread, or one landing on them would end the process without a drain. */
    obx_daemon_block_signals(&stop_signals);
    if (cfg->http_addr != NULL &&
        (http = obx_http_start(cfg->http_addr, handlers, msg, sizeof(msg))) == NULL) {
        fprintf(stderr, "outboxd %s: %s\n", job->name, msg);
        return 2;
    }
    /* The main thread reports readiness (the ready line, systemd) by the /readyz test. */
    run = *job;
    run.ready = handlers->ready;
    run.ready_ctx = handlers->ctx;
    code = obx_daemon_run(&run, (int)cfg->drain_timeout_seconds);
    obx_http_stop(http);
    return code;
}
