/* SPDX-License-Identifier: MIT */
/*
 * worker.c - the relay's and the consumer's common ground (worker.h).
 *
 * Outages are states, not errors: a server that stops answering is
 * logged once, its counter drops to 0, and the worker retries on a
 * growing pause until it answers again, which is logged once too.
 */
#include "worker.h"

#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "config/config.h"
#include "log.h"
#include "pause.h"

#include "common/banned.h" /* last: poisons unsafe functions */

outbox_status
obx_worker_init(struct obx_worker *w, const char *role, unsigned part, size_t stat_count,
                size_t histogram_count, const outbox_config *cfg,
                outbox_status (*check)(const struct obx_config *cfg, outbox_error *err),
                outbox_error *err)
{
    outbox_status st;

    memset(w, 0, sizeof(*w));
    atomic_init(&w->stop_requested, 0);
    w->role = role;
    w->stat_count = stat_count < OBX_WORKER_MAX_STATS ? stat_count : OBX_WORKER_MAX_STATS;
    w->histogram_count =
        histogram_count < OBX_WORKER_MAX_HISTOGRAMS ? histogram_count : OBX_WORKER_MAX_HISTOGRAMS;
    pthread_mutex_init(&w->stats_lock, NULL);
    if (cfg == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "no configuration given");
    }
    st = check(&cfg->values, err);
    if (st == OUTBOX_OK) {
        st = obx_config_init(&w->cfg, part, err);
    }
    if (st == OUTBOX_OK) {
        st = obx_config_copy(&w->cfg, &cfg->values, err);
    }
    if (st == OUTBOX_OK) {
        w->cfg.batch_size = obx_batch_size(&w->cfg, part); /* unset: the part's own */
        obx_config_replica_name(&w->cfg, w->name, sizeof(w->name));
    }
    return st;
}

void
obx_worker_fini(struct obx_worker *w)
{
    obx_config_fini(&w->cfg);
    pthread_mutex_destroy(&w->stats_lock);
}

static void
set_stat(struct obx_worker *w, int id, unsigned long long value, int add)
{
    if (id < 0 || (size_t)id >= w->stat_count) {
        return;
    }
    pthread_mutex_lock(&w->stats_lock);
    w->stats[id] = add ? w->stats[id] + value : value;
    pthread_mutex_unlock(&w->stats_lock);
}

void
obx_worker_request_stop(struct obx_worker *w)
{
    atomic_store(&w->stop_requested, 1);
}

int
obx_worker_stopping(struct obx_worker *w)
{
    return atomic_load(&w->stop_requested);
}

void
obx_worker_count(struct obx_worker *w, int id, unsigned long long n)
{
    set_stat(w, id, n, 1);
}

void
obx_worker_count_all(struct obx_worker *w, const struct obx_worker_add *adds, size_t count)
{
    pthread_mutex_lock(&w->stats_lock);
    for (size_t i = 0; i < count; i++) {
        if (adds[i].id >= 0 && (size_t)adds[i].id < w->stat_count) {
            w->stats[adds[i].id] += adds[i].n;
        }
    }
    pthread_mutex_unlock(&w->stats_lock);
}

unsigned long long
obx_worker_stat(struct obx_worker *w, int id)
{
    unsigned long long v = 0;

    if (id >= 0 && (size_t)id < w->stat_count) {
        pthread_mutex_lock(&w->stats_lock);
        v = w->stats[id];
        pthread_mutex_unlock(&w->stats_lock);
    }
    return v;
}

void
obx_worker_gauge(struct obx_worker *w, int id, unsigned long long value)
{
    set_stat(w, id, value, 0);
}

void
obx_worker_observe(struct obx_worker *w, int id, double seconds)
{
    if (id < 0 || (size_t)id >= w->histogram_count) {
        return;
    }
    pthread_mutex_lock(&w->stats_lock);
    obx_histogram_observe(&w->histograms[id], seconds);
    pthread_mutex_unlock(&w->stats_lock);
}

size_t
obx_worker_histogram(struct obx_worker *w, int id, unsigned long long *counts, size_t cap,
                     double *sum_seconds)
{
    size_t n;

    if (id < 0 || (size_t)id >= w->histogram_count) {
        return 0;
    }
    pthread_mutex_lock(&w->stats_lock);
    n = obx_histogram_cumulative(&w->histograms[id], counts, cap);
    if (sum_seconds != NULL) {
        *sum_seconds = w->histograms[id].sum_seconds;
    }
    pthread_mutex_unlock(&w->stats_lock);
    return n;
}

void
obx_worker_link_answers(struct obx_worker *w, struct obx_worker_link *l, const char *event,
                        const char *detail)
{
    if (!l->up) {
        if (obx_log_enabled && OUTBOX_LOG_INFO >= obx_log_min_level) {
            char line[512];
            size_t n = obx_logfmt_format(line, sizeof(line), "%s %s %s=%s", l->what, event, w->role,
                                         w->name);

            /* `detail` holds fields obx_logfmt_format escaped already. */
            snprintf(line + n, sizeof(line) - n, "%s%s", detail ? " " : "", detail ? detail : "");
            obx_log_write_line(OUTBOX_LOG_INFO, line);
        }
        l->up = 1;
        set_stat(w, l->stat_up, 1, 0);
    }
}

void
obx_worker_link_up(struct obx_worker *w, struct obx_worker_link *l, const char *event,
                   const char *detail)
{
    obx_worker_link_answers(w, l, event, detail);
    l->pause_ms = 0;
}

void
obx_worker_link_down(struct obx_worker *w, struct obx_worker_link *l, const char *why)
{
    if (l->up || l->pause_ms == 0) {
        obx_log(OUTBOX_LOG_WARN, "%s unavailable %s=%s error=%s", l->what, w->role, w->name, why);
        l->up = 0;
        set_stat(w, l->stat_up, 0, 0);
    }
    l->pause_ms = obx_grow_pause(l->pause_ms);
}

void
obx_worker_link_wait(struct obx_worker *w, const struct obx_worker_link *l)
{
    obx_pause_ms(&w->stop_requested, l->pause_ms);
}

int
obx_side_thread_start(struct obx_side_thread *t, void *(*body)(void *), void *arg)
{
    int rc;

    atomic_init(&t->stop, 0);
    rc = pthread_create(&t->thread, NULL, body, arg);
    t->started = rc == 0;
    return rc;
}

void
obx_side_thread_stop(struct obx_side_thread *t)
{
    if (t->started) {
        atomic_store(&t->stop, 1);
        pthread_join(t->thread, NULL);
        t->started = 0;
    }
}
