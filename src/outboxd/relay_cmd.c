/* SPDX-License-Identifier: MIT */
/*
 * relay_cmd.c - `outboxd relay`: one relay replica as a daemon.
 */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "outbox/worker.h"
#include "outboxd/service/daemon.h"
#include "outboxd/service/metrics.h"
#include "relay_metrics.h"
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

const struct obx_metric_def obx_relay_counters[] = {
    {OUTBOX_RELAY_LEASED, "leased", "rows leased"},
    {OUTBOX_RELAY_PUBLISHED, "published", "rows acked by the broker and finished"},
    {OUTBOX_RELAY_DUPLICATES, "duplicates", "published rows the broker already had (deduplicated)"},
    {OUTBOX_RELAY_RETRIED, "retried", "rows rejected by the broker and scheduled again"},
    {OUTBOX_RELAY_DEAD, "dead", "rows dead-lettered"},
    {OUTBOX_RELAY_INVALID, "invalid", "rows quarantined as invalid"},
    {OUTBOX_RELAY_RELEASED, "released", "rows handed back after a transport failure"},
    {OUTBOX_RELAY_LOST, "lost", "finishes refused because the lease had moved on"},
    {OUTBOX_RELAY_BATCHES, "batches", "lease batches published"},
    {OUTBOX_RELAY_LEASE_EXPIRIES, "lease_expiries",
     "rows taken over after their lease ran out with no outcome (a relay died or stalled)"},
};

const struct obx_metric_def obx_relay_gauges[] = {
    {OUTBOX_RELAY_OLDEST_DUE_SECONDS, "outbox_relay_oldest_due_age_seconds",
     "age of the oldest row due now (a backlog's wait)"},
    {OUTBOX_RELAY_TABLE_DEAD_TUPLES, "outbox_relay_table_dead_tuples",
     "dead row versions in the outbox table (bloat between vacuums)"},
    {OUTBOX_RELAY_TABLE_LAST_VACUUM_UNIX, "outbox_relay_table_last_vacuum_timestamp_seconds",
     "last vacuum or autovacuum of the outbox table, Unix time (0: none known)"},
    {OUTBOX_RELAY_INDEX_ENTRIES_PER_LEASE, "outbox_relay_claim_index_entries_per_lease",
     "claim-index entries a lease read, between the last two samples"},
    {OUTBOX_RELAY_ROWS_SCANNED_PER_LEASE, "outbox_relay_rows_scanned_per_lease",
     "table rows a lease read (leased or stepped over), between the last two samples"},
    {OUTBOX_RELAY_XMIN_HORIZON_AGE_SECONDS, "outbox_relay_xmin_horizon_age_seconds",
     "age of the oldest transaction of this database holding back vacuum's xmin horizon (alert "
     "over 300)"},
    {OUTBOX_RELAY_CLAIM_OPEN_SECONDS, "outbox_relay_claim_open_seconds",
     "age of the oldest window claim still out; it holds no transaction open, and past "
     "OUTBOX_LEASE_SECONDS its rows are given back"},
    {OUTBOX_RELAY_BLOCKED_AGGREGATES, "outbox_relay_blocked_aggregates",
     "ordered aggregates held by a dead or quarantined head, not skipped: their later events "
     "wait for outboxctl dead requeue or dead skip (quarantine release or quarantine skip for a "
     "quarantined head)"},
};

const struct obx_metric_def obx_relay_histograms[] = {
    {OUTBOX_RELAY_LEASE_SECONDS, "outbox_relay_lease_duration_seconds",
     "one lease statement, sent to answered"},
    {OUTBOX_RELAY_FINISH_SECONDS, "outbox_relay_finish_duration_seconds",
     "one finish statement, sent to answered"},
    {OUTBOX_RELAY_PUBLISH_SECONDS, "outbox_relay_publish_duration_seconds",
     "one batch, first publish to last ack"},
};

const size_t obx_relay_counter_count = sizeof(obx_relay_counters) / sizeof(obx_relay_counters[0]);
const size_t obx_relay_gauge_count = sizeof(obx_relay_gauges) / sizeof(obx_relay_gauges[0]);
const size_t obx_relay_histogram_count =
    sizeof(obx_relay_histograms) / sizeof(obx_relay_histograms[0]);

static unsigned long long
relay_value(void *ctx, int id)
{
    return outbox_relay_stat(ctx, (outbox_relay_stat_id)id);
}

static size_t
relay_histogram(void *ctx, int id, unsigned long long *counts, size_t cap, double *sum)
{
    return outbox_relay_histogram(ctx, (outbox_relay_histogram_id)id, counts, cap, sum);
}

/* What needs the relay's settings: the headroom before a republish could duplicate. */
struct relay_extra {
    outbox_relay *relay;
    long long duplicate_window_seconds;
};

static void
relay_extra_metrics(void *ctx, struct obx_buf *out)
{
    const struct relay_extra *x = ctx;
    unsigned long long unconfirmed =
        outbox_relay_stat(x->relay, OUTBOX_RELAY_OLDEST_UNCONFIRMED_SECONDS);

    obx_metrics_gauge(out, "outbox_relay_dedup_headroom_seconds",
                      "the stream's duplicate window minus the age of the oldest leased, "
                      "unfinished row: below 0 a republish could store an event twice",
                      x->duplicate_window_seconds - (long long)unconfirmed);
    obx_buf_appendf(out,
                    "# HELP outbox_dead_letters Dead letters waiting for an operator, by handler "
                    "(\"\" is the relay's own).\n# TYPE outbox_dead_letters gauge\n"
                    "outbox_dead_letters{handler=\"\"} %llu\n",
                    outbox_relay_stat(x->relay, OUTBOX_RELAY_DEAD_LETTERS));
}

int
obx_cmd_relay(const struct obx_config *cfg)
{
    /* Static: after an abandoned drain the relay thread still uses them until exit. */
    static outbox_relay *relay;
    static struct obx_worker_view view;
    static struct relay_extra extra;
    struct obx_http_handlers handlers;
    outbox_error err = {0};
    outbox_config *rc;
    outbox_status st;
    int code;

    rc = obx_cmd_worker_config(OUTBOX_CONFIG_RELAY, cfg, &err);
    st = rc != NULL ? outbox_relay_new(rc, &relay, &err) : OUTBOX_ENOMEM;

    outbox_config_free(rc);
    if (st != OUTBOX_OK) {
        fprintf(stderr, "outboxd relay: %s\n", err.message);
        return 2;
    }
    obx_test_hooks_apply_relay(relay);
    extra = (struct relay_extra){.relay = relay,
                                 .duplicate_window_seconds = cfg->duplicate_window_seconds};
    view = (struct obx_worker_view){.prefix = "relay",
                                    .counters = obx_relay_counters,
                                    .counter_count = obx_relay_counter_count,
                                    .gauges = obx_relay_gauges,
                                    .gauge_count = obx_relay_gauge_count,
                                    .histograms = obx_relay_histograms,
                                    .histogram_count = obx_relay_histogram_count,
                                    .database_up = OUTBOX_RELAY_DATABASE_UP,
                                    .broker_up = OUTBOX_RELAY_BROKER_UP,
                                    .read = relay_value,
                                    .read_histogram = relay_histogram,
                                    .extra = relay_extra_metrics,
                                    .extra_ctx = &extra,
                                    .ctx = relay};
    handlers = obx_worker_view_handlers(&view);
    code = obx_serve(&(struct obx_daemon_job){.ctx = relay,
                                              .run = run_relay,
                                              .stop = stop_relay,
                                              .name = "relay",
                                              .command = "relay"},
                     &handlers, cfg);
    if (!obx_daemon_abandoned()) { /* an abandoned worker thread may still run */
        outbox_relay_free(relay);
    }
    return code;
}
