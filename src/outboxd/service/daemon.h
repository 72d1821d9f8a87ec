/* SPDX-License-Identifier: MIT */
/*
 * daemon.h - running one long-lived worker under signals and a drain limit.
 *
 * The worker runs in its own thread; the main thread waits for SIGTERM or
 * SIGINT, asks the worker to stop, and gives it the drain timeout to
 * finish or release what it holds. A worker that overruns is abandoned:
 * its leases expire and another replica takes the rows over. Abandoned
 * while busy, the process exits 1; abandoned with nothing in flight (say,
 * closing a connection to a broker that went away), it exits 0. Whatever
 * stalls after that, the process ends OBX_EXIT_GRACE_SECONDS after the
 * drain timeout (exit_guard.h).
 */
#ifndef OBX_DAEMON_H
#define OBX_DAEMON_H

#include <signal.h>

struct obx_daemon_job {
    void *ctx;
    int (*run)(void *ctx);         /* the worker's loop; returns an exit code */
    void (*stop)(void *ctx);       /* asks the loop to return; called from the main thread */
    const char *name;              /* for logs: "relay", "consumer" */
    const char *command;           /* the outboxd command it is: "relay", "consume" */
    int (*ready)(void *ready_ctx); /* 1 once the worker can work (what /readyz says) */
    void *ready_ctx;
    int (*busy)(void *ctx); /* 1 while exiting would cut work short; NULL: always */
};

/*
 * Blocks SIGTERM and SIGINT in the calling thread and in every thread it
 * starts afterwards, and ignores SIGPIPE; `set` gets the stop signals.
 * Call before starting any thread, so only the main thread takes them.
 */
void obx_daemon_block_signals(sigset_t *set);

/* Runs `job` until it returns or a signal stops it. Returns the exit code. */
int obx_daemon_run(const struct obx_daemon_job *job, int drain_timeout_seconds);

/* 1 once a run left its worker behind at the drain timeout: what it uses must not be freed. */
int obx_daemon_abandoned(void);

#endif
