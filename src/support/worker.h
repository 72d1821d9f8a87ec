/* SPDX-License-Identifier: MIT */
/*
 * worker.h - what a relay and a consumer share: their own copy of the
 * configuration and their name, the stop flag, counters read from any
 * thread, and the state of each server they need (up, or away with a
 * growing pause), logged once per change; and the thread each runs beside
 * its loop (its upkeep).
 */
#ifndef OBX_WORKER_H
#define OBX_WORKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "config/settings.h"
#include "histogram.h"
#include "outbox/outbox.h"

enum { OBX_WORKER_MAX_STATS = 32, OBX_WORKER_MAX_HISTOGRAMS = 4 };

struct obx_worker {
    const char *role;          /* "relay", "consumer": its key in log lines */
    struct obx_config cfg;     /* owned copy of the caller's configuration */
    char name[96];             /* cfg.name, or host-pid when it is unset */
    atomic_int stop_requested; /* set by the public _stop(), from any thread or a signal handler */
    pthread_mutex_t stats_lock;
    unsigned long long stats[OBX_WORKER_MAX_STATS]; /* by the public stat ids; stats_lock */
    size_t stat_count;
    struct obx_histogram histograms[OBX_WORKER_MAX_HISTOGRAMS]; /* by public id; stats_lock */
    size_t histogram_count;
};

/*
 * A server the worker needs, as the worker's own thread sees it. `what`
 * names it in log lines ("database", "broker", "feed"); `stat_up` is the
 * public counter that reads 1 while it answers.
 */
struct obx_worker_link {
    const char *what;
    int stat_up;
    int up;
    int pause_ms; /* how long to wait before the next try; 0 while up */
};

/*
 * Checks `cfg` with `check` (the rules that need several settings), then
 * copies it. `part` is the kind of configuration the worker takes.
 * OUTBOX_EINVAL names the setting.
 */
outbox_status obx_worker_init(struct obx_worker *w, const char *role, unsigned part,
                              size_t stat_count, size_t histogram_count, const outbox_config *cfg,
                              outbox_status (*check)(const struct obx_config *cfg,
                                                     outbox_error *err),
                              outbox_error *err);
void obx_worker_fini(struct obx_worker *w);

/* Asks the worker's loop to stop; lock-free, so safe from a signal handler too. */
void obx_worker_request_stop(struct obx_worker *w);

/* 1 once a stop was asked for. */
int obx_worker_stopping(struct obx_worker *w);

/* Adds `n` to counter `id`. */
void obx_worker_count(struct obx_worker *w, int id, unsigned long long n);

/* Adds several at once, under one lock: what one batch did. */
struct obx_worker_add {
    int id;
    unsigned long long n;
};
void obx_worker_count_all(struct obx_worker *w, const struct obx_worker_add *adds, size_t count);

/* Counter `id`; 0 for an id the worker does not have. */
unsigned long long obx_worker_stat(struct obx_worker *w, int id);

/* Sets gauge `id` (a stat the worker samples rather than counts). */
void obx_worker_gauge(struct obx_worker *w, int id, unsigned long long value);

/* Records `seconds` in histogram `id`. */
void obx_worker_observe(struct obx_worker *w, int id, double seconds);

/* Histogram `id` as the public API gives it (outbox_relay_histogram()); 0 for an unknown id. */
size_t obx_worker_histogram(struct obx_worker *w, int id, unsigned long long *counts, size_t cap,
                            double *sum_seconds);

/*
 * The server answers: "<what> <event> <role>=<name> <detail>" once, and the
 * pause starts over. `detail` (or NULL): fields built by obx_logfmt_format.
 */
void obx_worker_link_up(struct obx_worker *w, struct obx_worker_link *l, const char *event,
                        const char *detail);

/*
 * The server answers again, but the pause stands: the worker only knows it
 * is reachable (it connects, it answers a request), not yet that it does
 * its work, so retries stay paced until it does (obx_worker_link_up).
 */
void obx_worker_link_answers(struct obx_worker *w, struct obx_worker_link *l, const char *event,
                             const char *detail);

/* It does not: "<what> unavailable <role>=<name> error=..." once per outage; the pause grows. */
void obx_worker_link_down(struct obx_worker *w, struct obx_worker_link *l, const char *why);

/* Waits out the link's pause, or less when the worker is asked to stop. */
void obx_worker_link_wait(struct obx_worker *w, const struct obx_worker_link *l);

/*
 * A thread beside a worker's loop (its upkeep), with a stop flag of its own:
 * it runs until its owner stops it after the loop has ended, so a process
 * that exits during a drain never leaves it ended and unjoined.
 */
struct obx_side_thread {
    atomic_int stop; /* set by obx_side_thread_stop() alone; the body polls it */
    pthread_t thread;
    int started;
};

/* Runs `body(arg)` on a new thread. Returns 0, or an errno value (then nothing runs). */
int obx_side_thread_start(struct obx_side_thread *t, void *(*body)(void *), void *arg);

/* Sets the stop flag and waits for the body to return; nothing when it never started. */
void obx_side_thread_stop(struct obx_side_thread *t);

#endif
