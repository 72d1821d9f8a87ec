/* SPDX-License-Identifier: MIT */
/*
 * metrics.c - counters and gauges in the Prometheus text format.
 */
#include "metrics.h"

#include <stdio.h>

#include "banned.h" /* last: poisons unsafe functions */

void
obx_metrics_counters(struct obx_buf *out, const char *prefix, const struct obx_metric *m,
                     size_t count)
{
    for (size_t i = 0; i < count; i++) {
        obx_buf_appendf(out,
                        "# HELP outbox_%s_%s_total %s.\n# TYPE outbox_%s_%s_total counter\n"
                        "outbox_%s_%s_total %llu\n",
                        prefix, m[i].name, m[i].help, prefix, m[i].name, prefix, m[i].name,
                        m[i].value);
    }
}

void
obx_metrics_up(struct obx_buf *out, int database_up, int broker_up)
{
    obx_buf_appendf(out,
                    "# HELP outbox_database_up 1 while the database answers.\n"
                    "# TYPE outbox_database_up gauge\noutbox_database_up %d\n"
                    "# HELP outbox_broker_up 1 while the broker (or the feed) answers.\n"
                    "# TYPE outbox_broker_up gauge\noutbox_broker_up %d\n",
                    database_up, broker_up);
}

int
obx_serve(const struct obx_daemon_job *job, const struct obx_http_handlers *handlers,
          const struct obx_config *cfg)
{
    struct obx_http *http = NULL;
    char msg[256];
    sigset_t stop_signals;
    int code;

    /* Before the HTTP server's threads start: a stop signal must reach only the main
     * thread, or one landing on them would end the process without a drain. */
    obx_daemon_block_signals(&stop_signals);
    if (cfg->http_addr != NULL &&
        (http = obx_http_start(cfg->http_addr, handlers, msg, sizeof(msg))) == NULL) {
        fprintf(stderr, "outboxd %s: %s\n", job->name, msg);
        return 2;
    }
    code = obx_daemon_run(job, (int)cfg->drain_timeout_seconds);
    obx_http_stop(http);
    return code;
}
