/* SPDX-License-Identifier: MIT */
/*
 * daemon.c - signals, the worker thread and the drain timeout.
 *
 * Signals are blocked in every thread and taken synchronously with
 * sigtimedwait() in the main thread, so no handler runs in the middle of
 * library code.
 */
#include "outboxd/service/daemon.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "outboxd/service/exit_guard.h"
#include "outboxd/service/lifecycle.h"
#include "support/log.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static int abandoned; /* set by the main thread only, before it returns to exit */

struct worker_state {
    const struct obx_daemon_job *job;
    pthread_mutex_t lock;
    pthread_cond_t done_cond;
    int done;
    int exit_code;
};

static void *
worker_main(void *arg)
{
    struct worker_state *ws = arg;
    int code = ws->job->run(ws->job->ctx);

    pthread_mutex_lock(&ws->lock);
    ws->done = 1;
    ws->exit_code = code;
    pthread_cond_signal(&ws->done_cond);
    pthread_mutex_unlock(&ws->lock);
    return NULL;
}

/* Waits up to `seconds` for the worker to finish; returns 1 if it did. */
static int
wait_done(struct worker_state *ws, int seconds)
{
    struct timespec deadline;
    int done;

    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += seconds;
    pthread_mutex_lock(&ws->lock);
    while (!ws->done) {
        if (pthread_cond_timedwait(&ws->done_cond, &ws->lock, &deadline) == ETIMEDOUT) {
            break;
        }
    }
    done = ws->done;
    pthread_mutex_unlock(&ws->lock);
    return done;
}

/* Blocks until a stop signal arrives or the worker ends by itself. */
static void
wait_for_signal(struct worker_state *ws, const sigset_t *set)
{
    struct timespec tick = {0, 200 * 1000 * 1000};
    struct obx_lifecycle life;

    obx_lifecycle_init(&life, ws->job);
    for (;;) {
        int sig;

        obx_lifecycle_tick(&life); /* ready line, sd_notify READY=1 and watchdog */
        sig = sigtimedwait(set, NULL, &tick);

        if (sig == SIGTERM || sig == SIGINT) {
            obx_log(OUTBOX_LOG_INFO, "stop requested signal=%s",
                    sig == SIGTERM ? "SIGTERM" : "SIGINT");
            return;
        }
        pthread_mutex_lock(&ws->lock);
        sig = ws->done;
        pthread_mutex_unlock(&ws->lock);
        if (sig) {
            return;
        }
    }
}

void
obx_daemon_block_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
    pthread_sigmask(SIG_BLOCK, set, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int
obx_daemon_abandoned(void)
{
    return abandoned;
}

int
obx_daemon_run(const struct obx_daemon_job *job, int drain_timeout_seconds)
{
    /* Static: a worker abandoned at the drain timeout still signals it while the process
     * exits, after this frame is gone. */
    static struct worker_state ws;
    sigset_t set;
    pthread_t thread;

    ws = (struct worker_state){.job = job, .exit_code = 1};
    obx_daemon_block_signals(&set);
    pthread_mutex_init(&ws.lock, NULL);
    pthread_cond_init(&ws.done_cond, NULL);
    if (pthread_create(&thread, NULL, worker_main, &ws) != 0) {
        obx_log(OUTBOX_LOG_ERROR, "cannot start worker thread job=%s", job->name);
        return 1;
    }
    wait_for_signal(&ws, &set);
    /* From here the process ends within the drain timeout and a grace period, whatever
     * stalls after the worker (exit_guard.c). */
    obx_exit_guard_arm(drain_timeout_seconds + OBX_EXIT_GRACE_SECONDS);
    obx_lifecycle_stopping();
    job->stop(job->ctx);
    if (!wait_done(&ws, drain_timeout_seconds)) {
        abandoned = 1;
        if (job->busy != NULL && !job->busy(job->ctx)) {
            /* Nothing of the work is cut short: what it still waits for (a broker that
             * stopped answering) owes nobody an outcome. */
            obx_log(OUTBOX_LOG_INFO,
                    "drain timeout exceeded with nothing in flight, exiting job=%s "
                    "drain_timeout_seconds=%d",
                    job->name, drain_timeout_seconds);
            obx_exit_guard_set_code(0);
            return 0;
        }
        /* Leases held now expire and other replicas take the rows over. */
        obx_log(OUTBOX_LOG_WARN, "drain timeout exceeded, exiting job=%s drain_timeout_seconds=%d",
                job->name, drain_timeout_seconds);
        obx_exit_guard_set_code(1);
        return 1;
    }
    obx_exit_guard_set_code(ws.exit_code); /* read under the lock by wait_done: it is final */
    pthread_join(thread, NULL);
    pthread_cond_destroy(&ws.done_cond);
    pthread_mutex_destroy(&ws.lock);
    return ws.exit_code;
}
