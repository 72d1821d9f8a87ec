/* SPDX-License-Identifier: MIT */
/*
 * lifecycle.c - readiness reporting for outboxd's long-lived commands.
 *
 * "Ready" means what /readyz means: the worker reaches both the database
 * and the broker. READY=1 goes to systemd at the same moment as the ready
 * line, so a unit ordered After= an outboxd unit starts once it can work.
 * The watchdog is pinged from the main thread after it read the worker's
 * stats under the worker's lock, so a worker wedged while holding that
 * lock stops the pings and systemd restarts the process; a worker that
 * waits out an outage still pings (it is alive, and restarting would not
 * bring the database back).
 */
#include "lifecycle.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "notify.h"
#include "outbox/worker.h"

#include "banned.h" /* last: poisons unsafe functions */

static long long
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * The same test as the HTTP handlers' ready callbacks in relay_cmd.c and
 * consume_cmd.c; a job has no ready callback of its own yet, so the two
 * jobs outboxd runs are told apart by name. Unknown jobs count as ready.
 */
static int
job_is_ready(const struct obx_daemon_job *job)
{
    if (strcmp(job->name, "relay") == 0) {
        outbox_relay_stats st;

        outbox_relay_stats_get(job->ctx, &st);
        return st.database_up && st.broker_up;
    }
    if (strcmp(job->name, "consumer") == 0) {
        outbox_consumer_stats st;

        outbox_consumer_stats_get(job->ctx, &st);
        return st.database_up && st.broker_up;
    }
    return 1;
}

void
obx_lifecycle_init(struct obx_lifecycle *lc, const struct obx_daemon_job *job)
{
    /* Pinging at half the timeout is what sd_watchdog_enabled(3) advises. */
    long long usec = obx_notify_watchdog_usec();

    *lc = (struct obx_lifecycle){.job = job, .state = -1, .ping_interval_ms = usec / 2000};
    if (usec > 0 && lc->ping_interval_ms == 0) {
        lc->ping_interval_ms = 1;
    }
}

void
obx_lifecycle_tick(struct obx_lifecycle *lc)
{
    int ready = job_is_ready(lc->job);
    long long now = now_ms();

    if (ready && !lc->ready_logged) {
        const char *command = strcmp(lc->job->name, "consumer") == 0 ? "consume" : lc->job->name;

        obx_log(OUTBOX_LOG_INFO, OBX_READY_MESSAGE " command=%s", command);
        lc->ready_logged = 1;
    }
    if (ready != lc->state) {
        /* READY=1 more than once is harmless; STATUS= shows in `systemctl status`. */
        obx_notify(ready ? "READY=1\nSTATUS=ready: the database and the broker answer"
                         : "STATUS=waiting for the database and the broker");
        lc->state = ready;
    }
    if (lc->ping_interval_ms > 0 && now >= lc->next_ping_ms) {
        obx_notify("WATCHDOG=1");
        lc->next_ping_ms = now + lc->ping_interval_ms;
    }
}

void
obx_lifecycle_stopping(void)
{
    obx_notify("STOPPING=1\nSTATUS=draining");
}
