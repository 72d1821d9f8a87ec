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

#include "common/clock.h"
#include "notify.h"
#include "support/log.h"

#include "common/banned.h" /* last: poisons unsafe functions */

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
    int ready = lc->job->ready == NULL || lc->job->ready(lc->job->ready_ctx);
    long long now = obx_monotonic_ms();

    if (ready && !lc->ready_logged) {
        obx_log(OUTBOX_LOG_INFO, OBX_READY_MESSAGE " command=%s", lc->job->command);
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
