/* SPDX-License-Identifier: MIT */
/*
 * daemon.h - running one long-lived worker under signals and a drain limit.
 *
 * The worker runs in its own thread; the main thread waits for SIGTERM or
 * SIGINT, asks the worker to stop, and gives it the drain timeout to
 * finish or release what it holds. A worker that overruns is abandoned:
 * its leases expire and another replica takes the rows over.
 */
#ifndef OBX_DAEMON_H
#define OBX_DAEMON_H

struct obx_daemon_job {
    void *ctx;
    int (*run)(void *ctx);   /* the worker's loop; returns an exit code */
    void (*stop)(void *ctx); /* asks the loop to return; called from the main thread */
    const char *name;        /* for logs: "relay", "consumer" */
};

/* Runs `job` until it returns or a signal stops it. Returns the exit code. */
int obx_daemon_run(const struct obx_daemon_job *job, int drain_timeout_seconds);

#endif
