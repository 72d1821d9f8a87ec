/* SPDX-License-Identifier: MIT */
/*
 * lifecycle.h - what a running daemon tells the outside about its state:
 * one stable log line the first time its worker is ready (what container
 * log wait strategies look for), and READY=1, STATUS=, WATCHDOG=1 and
 * STOPPING=1 for systemd (notify.h). Driven by the daemon's main thread.
 */
#ifndef OBX_LIFECYCLE_H
#define OBX_LIFECYCLE_H

#include "daemon.h"

/*
 * The ready line's constant message; the line reads
 * `<time> level=info outboxd ready command=relay` (or command=consume).
 * Tests, the docs and users' wait strategies grep for it: never change it.
 */
#define OBX_READY_MESSAGE "outboxd ready"

struct obx_lifecycle {
    const struct obx_daemon_job *job; /* borrowed from the caller */
    int state;                        /* last reported: -1 nothing yet, 0 waiting, 1 ready */
    int ready_logged;                 /* the ready line is printed once per process */
    long long ping_interval_ms;       /* half the watchdog timeout; 0: no watchdog */
    long long next_ping_ms;           /* CLOCK_MONOTONIC */
};

void obx_lifecycle_init(struct obx_lifecycle *lc, const struct obx_daemon_job *job);

/* Call every few hundred ms: reports readiness changes and pings the watchdog. */
void obx_lifecycle_tick(struct obx_lifecycle *lc);

/* The daemon began to drain: STOPPING=1. */
void obx_lifecycle_stopping(void);

#endif
