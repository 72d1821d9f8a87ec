/* SPDX-License-Identifier: MIT */
/*
 * metrics.c - counters and gauges in the Prometheus text format.
 */
#include "metrics.h"

#include <stdio.h>

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
    append_up(out, (int)v->read(v->ctx, v->database_up), (int)v->read(v->ctx, v->broker_up));
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
