/* SPDX-License-Identifier: MIT */
/*
 * relay_cmd.c - `outboxd relay`: one relay replica as a daemon.
 */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "log.h"
#include "metrics.h"
#include "outbox/worker.h"

#include "banned.h" /* last: poisons unsafe functions */

void
obx_relay_options_from_config(const struct obx_config *cfg, void *out)
{
    outbox_relay_options *o = out;

    outbox_relay_options_init(o);
    o->database_url = cfg->database_url;
    o->schema = cfg->schema;
    o->nats_url = cfg->nats_url;
    o->bus = strcmp(cfg->bus, "nats-core") == 0 ? OUTBOX_BUS_NATS_CORE
             : strcmp(cfg->bus, "db") == 0      ? OUTBOX_BUS_DB
                                                : OUTBOX_BUS_JETSTREAM;
    o->mode = strcmp(cfg->relay_mode, "prune") == 0 ? OUTBOX_RELAY_PRUNE : OUTBOX_RELAY_MARK;
    o->stream = cfg->stream;
    o->subject_prefix = cfg->subject_prefix;
    o->ce_source = cfg->ce_source;
    o->name = cfg->name;
    o->nats_creds_file = cfg->nats_creds;
    o->nats_tls_ca_file = cfg->nats_tls_ca;
    o->nats_tls_cert_file = cfg->nats_tls_cert;
    o->nats_tls_key_file = cfg->nats_tls_key;
    o->batch_size = (int)cfg->batch_size;
    o->lease_seconds = (int)cfg->lease_seconds;
    o->max_attempts = (int)cfg->max_attempts;
    o->max_lease_expiries = (int)cfg->max_lease_expiries;
    o->publish_timeout_ms = (int)cfg->publish_timeout_ms;
    o->max_in_flight = (int)cfg->max_in_flight;
    o->poll_max_ms = (int)cfg->poll_max_ms;
    o->listen = (int)cfg->listen;
    o->backoff_base_ms = (int)cfg->backoff_base_ms;
    o->backoff_cap_ms = (int)cfg->backoff_cap_ms;
    o->retention_seconds = (int)(cfg->retention_hours * 3600);
    o->drain_timeout_ms = (int)(cfg->drain_timeout_seconds * 1000);
    o->stream_max_age_seconds = cfg->stream_max_age_seconds;
    o->stream_max_bytes = cfg->stream_max_bytes;
    o->duplicate_window_seconds = (int)cfg->duplicate_window_seconds;
    o->crash_on_event_type = cfg->test_crash_on_event_type;
    o->crash_after_publish = (int)cfg->test_crash_after_publish;
}

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

static int
relay_ready(void *ctx)
{
    outbox_relay_stats st;

    outbox_relay_stats_get(ctx, &st);
    return st.database_up && st.broker_up;
}

static void
relay_metrics(void *ctx, struct obx_buf *out)
{
    outbox_relay_stats st;

    outbox_relay_stats_get(ctx, &st);
    const struct obx_metric m[] = {
        {"leased", "rows leased", st.leased},
        {"published", "rows acked by the broker and finished", st.published},
        {"duplicates", "published rows the broker already had (deduplicated)", st.duplicates},
        {"retried", "rows rejected by the broker and scheduled again", st.retried},
        {"dead", "rows dead-lettered", st.dead},
        {"invalid", "rows quarantined as invalid", st.invalid},
        {"released", "rows handed back after a transport failure", st.released},
        {"lost", "finishes refused because the lease had moved on", st.lost},
        {"batches", "lease batches published", st.batches},
    };

    obx_metrics_counters(out, "relay", m, sizeof(m) / sizeof(m[0]));
    obx_metrics_up(out, st.database_up, st.broker_up);
}

int
obx_cmd_relay(const struct obx_config *cfg)
{
    outbox_relay_options opts;
    /* Static: after an abandoned drain the relay thread still uses it until exit. */
    static outbox_relay *relay;
    outbox_error err;
    int code;

    obx_relay_options_from_config(cfg, &opts);
    if (outbox_relay_new(&opts, &relay, &err) != OUTBOX_OK) {
        fprintf(stderr, "outboxd relay: %s\n", err.message);
        return 2;
    }
    code = obx_serve(
        &(struct obx_daemon_job){
            .ctx = relay, .run = run_relay, .stop = stop_relay, .name = "relay"},
        &(struct obx_http_handlers){.ctx = relay, .metrics = relay_metrics, .ready = relay_ready},
        cfg);
    if (code != 1) {
        outbox_relay_free(relay);
    }
    return code;
}
