/* SPDX-License-Identifier: MIT */
/*
 * relay_cmd.c - `outboxd relay`: one relay replica as a daemon.
 */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "outbox/worker.h"
#include "outboxd/service/metrics.h"
#include "test_hooks.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static int
run_relay(void *ctx)
{
    outbox_error err;

    return outbox_relay_run(ctx, &err) == OUTBOX_OK ? 0 : 1;
}

static void
stop_relay(void *ctx)
{
    outbox_relay_stop(ctx);
}

static const struct obx_metric_def relay_counters[] = {
    {OUTBOX_RELAY_LEASED, "leased", "rows leased"},
    {OUTBOX_RELAY_PUBLISHED, "published", "rows acked by the broker and finished"},
    {OUTBOX_RELAY_DUPLICATES, "duplicates", "published rows the broker already had (deduplicated)"},
    {OUTBOX_RELAY_RETRIED, "retried", "rows rejected by the broker and scheduled again"},
    {OUTBOX_RELAY_DEAD, "dead", "rows dead-lettered"},
    {OUTBOX_RELAY_INVALID, "invalid", "rows quarantined as invalid"},
    {OUTBOX_RELAY_RELEASED, "released", "rows handed back after a transport failure"},
    {OUTBOX_RELAY_LOST, "lost", "finishes refused because the lease had moved on"},
    {OUTBOX_RELAY_BATCHES, "batches", "lease batches published"},
};

static unsigned long long
relay_value(void *ctx, int id)
{
    return outbox_relay_stat(ctx, (outbox_relay_stat_id)id);
}

int
obx_cmd_relay(const struct obx_config *cfg)
{
    /* Static: after an abandoned drain the relay thread still uses them until exit. */
    static outbox_relay *relay;
    static struct obx_worker_view view;
    struct obx_http_handlers handlers;
    outbox_error err = {0};
    outbox_config *rc = obx_cmd_worker_config(OUTBOX_CONFIG_RELAY, cfg, &err);
    outbox_status st = rc != NULL ? outbox_relay_new(rc, &relay, &err) : OUTBOX_ENOMEM;
    int code;

    outbox_config_free(rc);
    if (st != OUTBOX_OK) {
        fprintf(stderr, "outboxd relay: %s\n", err.message);
        return 2;
    }
    obx_test_hooks_apply_relay(relay);
    view = (struct obx_worker_view){.prefix = "relay",
                                    .counters = relay_counters,
                                    .counter_count =
                                        sizeof(relay_counters) / sizeof(relay_counters[0]),
                                    .database_up = OUTBOX_RELAY_DATABASE_UP,
                                    .broker_up = OUTBOX_RELAY_BROKER_UP,
                                    .read = relay_value,
                                    .ctx = relay};
    handlers = obx_worker_view_handlers(&view);
    code = obx_serve(&(struct obx_daemon_job){.ctx = relay,
                                              .run = run_relay,
                                              .stop = stop_relay,
                                              .name = "relay",
                                              .command = "relay"},
                     &handlers, cfg);
    if (code != 1) {
        outbox_relay_free(relay);
    }
    return code;
}
