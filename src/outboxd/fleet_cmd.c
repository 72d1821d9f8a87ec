/* SPDX-License-Identifier: MIT */
/*
 * fleet_cmd.c - `outboxd relay` with OUTBOX_FLEET_FILE: one replica of a
 * fleet relay, serving the databases it owns, each labelled
 * database="NAME" on /metrics with the same names a one-database relay uses.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "fleet/fleet.h"
#include "outbox/worker.h"
#include "outboxd/service/daemon.h"
#include "relay_metrics.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static int
run_fleet(void *ctx)
{
    return obx_fleet_run(ctx) == OUTBOX_OK ? 0 : 1;
}

static void
stop_fleet(void *ctx)
{
    obx_fleet_stop(ctx);
}

/* One metric's lines, one per owned database: what a visit writes. */
struct line_job {
    struct obx_buf *out;
    const char *name;
    int id;
    int kind; /* 0 counter, 1 gauge, 2 histogram, 3 database up, 4 broker up, 5 headroom,
               * 6 dead letters */
    long long duplicate_window_seconds;
};

static void
histogram_lines(struct line_job *j, const struct obx_fleet_view *v)
{
    unsigned long long counts[32];
    const double *bounds;
    size_t buckets = outbox_histogram_bounds(&bounds);
    double sum = 0;
    size_t n = outbox_relay_histogram(v->relay, (outbox_relay_histogram_id)j->id, counts,
                                      sizeof(counts) / sizeof(counts[0]), &sum);

    for (size_t b = 0; b < n && b < buckets; b++) {
        if (b + 1 == buckets) {
            obx_buf_appendf(j->out, "%s_bucket{database=\"%s\",le=\"+Inf\"} %llu\n", j->name,
                            v->name, counts[b]);
        } else {
            obx_buf_appendf(j->out, "%s_bucket{database=\"%s\",le=\"%g\"} %llu\n", j->name, v->name,
                            bounds[b], counts[b]);
        }
    }
    obx_buf_appendf(j->out, "%s_sum{database=\"%s\"} %.6f\n%s_count{database=\"%s\"} %llu\n",
                    j->name, v->name, sum, j->name, v->name, n > 0 ? counts[n - 1] : 0ULL);
}

static void
member_line(void *ctx, const struct obx_fleet_view *v)
{
    struct line_job *j = ctx;

    if (v->relay == NULL) {
        return; /* not owned here: its figures are the owner's to report */
    }
    switch (j->kind) {
    case 0:
        obx_buf_appendf(j->out, "outbox_relay_%s_total{database=\"%s\"} %llu\n", j->name, v->name,
                        outbox_relay_stat(v->relay, (outbox_relay_stat_id)j->id));
        break;
    case 1:
        obx_buf_appendf(j->out, "%s{database=\"%s\"} %llu\n", j->name, v->name,
                        outbox_relay_stat(v->relay, (outbox_relay_stat_id)j->id));
        break;
    case 2:
        histogram_lines(j, v);
        break;
    case 5:
        obx_buf_appendf(
            j->out, "%s{database=\"%s\"} %lld\n", j->name, v->name,
            j->duplicate_window_seconds -
                (long long)outbox_relay_stat(v->relay, OUTBOX_RELAY_OLDEST_UNCONFIRMED_SECONDS));
        break;
    case 6:
        obx_buf_appendf(j->out, "%s{database=\"%s\",handler=\"\"} %llu\n", j->name, v->name,
                        outbox_relay_stat(v->relay, OUTBOX_RELAY_DEAD_LETTERS));
        break;
    default:
        obx_buf_appendf(j->out, "%s{database=\"%s\"} %llu\n", j->name, v->name,
                        outbox_relay_stat(v->relay, j->kind == 3 ? OUTBOX_RELAY_DATABASE_UP
                                                                 : OUTBOX_RELAY_BROKER_UP));
        break;
    }
}

static void
ownership_line(void *ctx, const struct obx_fleet_view *v)
{
    struct line_job *j = ctx;

    if (j->kind == 2) {
        obx_buf_appendf(j->out, "%s{database=\"%s\"} %.6f\n", j->name, v->name,
                        v->window_wait_seconds);
        return;
    }
    obx_buf_appendf(j->out, "%s{database=\"%s\"} %llu\n", j->name, v->name,
                    j->kind == 0 ? (unsigned long long)v->owned : v->takeovers);
}

struct fleet_ctx {
    struct obx_fleet *fleet;
    long long duplicate_window_seconds;
};

static void
section(const struct fleet_ctx *fc, struct obx_buf *out, const char *name, const char *help,
        const char *type, int id, int kind, void (*visit)(void *, const struct obx_fleet_view *))
{
    struct line_job j = {.out = out,
                         .name = name,
                         .id = id,
                         .kind = kind,
                         .duplicate_window_seconds = fc->duplicate_window_seconds};
    char full[160];

    if (kind == 0 && visit == member_line) {
        snprintf(full, sizeof(full), "outbox_relay_%s_total", name);
    } else {
        snprintf(full, sizeof(full), "%s", name);
    }
    obx_buf_appendf(out, "# HELP %s %s.\n# TYPE %s %s\n", full, help, full, type);
    obx_fleet_visit(fc->fleet, visit, &j);
}

static void
fleet_metrics(void *ctx, struct obx_buf *out)
{
    const struct fleet_ctx *fc = ctx;
    size_t members, owned, capacity, in_flight, waiting;

    obx_fleet_counts(fc->fleet, &members, &owned);
    obx_fleet_window_state(fc->fleet, &capacity, &in_flight, &waiting);
    obx_metrics_gauge(out, "outbox_fleet_window_capacity",
                      "messages the replica's databases may have in flight together",
                      (long long)capacity);
    obx_metrics_gauge(out, "outbox_fleet_window_in_flight",
                      "messages in flight from all the replica's databases", (long long)in_flight);
    obx_metrics_gauge(out, "outbox_fleet_window_waiting",
                      "databases whose next batch waits for room in the window",
                      (long long)waiting);
    obx_metrics_gauge(out, "outbox_fleet_databases", "databases in the fleet file",
                      (long long)members);
    obx_metrics_gauge(out, "outbox_fleet_databases_owned", "databases this replica serves now",
                      (long long)owned);
    section(fc, out, "outbox_fleet_database_owned",
            "1 while this replica holds the database's ownership lock", "gauge", 0, 0,
            ownership_line);
    section(fc, out, "outbox_fleet_takeovers_total",
            "times this replica took the database's ownership lock", "counter", 0, 1,
            ownership_line);
    section(fc, out, "outbox_fleet_window_wait_seconds_total",
            "time the database's next batch waited for room in the replica's window", "counter", 0,
            2, ownership_line);
    for (size_t i = 0; i < obx_relay_counter_count; i++) {
        section(fc, out, obx_relay_counters[i].name, obx_relay_counters[i].help, "counter",
                obx_relay_counters[i].id, 0, member_line);
    }
    for (size_t i = 0; i < obx_relay_gauge_count; i++) {
        section(fc, out, obx_relay_gauges[i].name, obx_relay_gauges[i].help, "gauge",
                obx_relay_gauges[i].id, 1, member_line);
    }
    for (size_t i = 0; i < obx_relay_histogram_count; i++) {
        section(fc, out, obx_relay_histograms[i].name, obx_relay_histograms[i].help, "histogram",
                obx_relay_histograms[i].id, 2, member_line);
    }
    section(fc, out, "outbox_database_up", "1 while the database answers", "gauge", 0, 3,
            member_line);
    section(fc, out, "outbox_broker_up", "1 while the broker answers", "gauge", 0, 4, member_line);
    section(fc, out, "outbox_relay_dedup_headroom_seconds",
            "the stream's duplicate window minus the age of the oldest leased, unfinished row: "
            "below 0 a republish could store an event twice",
            "gauge", 0, 5, member_line);
    section(fc, out, "outbox_dead_letters",
            "Dead letters waiting for an operator, by handler (\"\" is the relay's own)", "gauge",
            0, 6, member_line);
}

/* A fleet replica is ready once running: owning nothing (others own all) is healthy. */
static int
fleet_ready(void *ctx)
{
    (void)ctx;
    return 1;
}

int
obx_cmd_fleet(const struct obx_config *cfg)
{
    /* Static: after an abandoned drain the fleet's threads still use it until exit. */
    static struct obx_fleet *fleet;
    static struct fleet_ctx fc;
    struct obx_http_handlers handlers;
    outbox_error err = {0};
    sigset_t hup;
    int code;

    if (obx_fleet_new(cfg, &fleet, &err) != OUTBOX_OK) {
        fprintf(stderr, "outboxd relay: %s\n", err.message);
        return 2;
    }
    /* Blocked in every thread from here on; the fleet's own thread takes it. */
    sigemptyset(&hup);
    sigaddset(&hup, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &hup, NULL);
    fc = (struct fleet_ctx){.fleet = fleet,
                            .duplicate_window_seconds = cfg->duplicate_window_seconds};
    handlers =
        (struct obx_http_handlers){.ctx = &fc, .metrics = fleet_metrics, .ready = fleet_ready};
    code = obx_serve(&(struct obx_daemon_job){.ctx = fleet,
                                              .run = run_fleet,
                                              .stop = stop_fleet,
                                              .name = "fleet",
                                              .command = "relay"},
                     &handlers, cfg);
    if (!obx_daemon_abandoned()) { /* an abandoned worker thread may still run */
        obx_fleet_free(fleet);
    }
    return code;
}
