/* SPDX-License-Identifier: MIT */
/*
 * demo_procs.h - the demo's relay and consumer replicas: real outboxd
 * processes, children of the demo, each logging to its own file.
 */
#ifndef OBX_DEMO_PROCS_H
#define OBX_DEMO_PROCS_H

#include <sys/types.h>

#include "config/settings.h"

struct obx_demo_proc {
    char name[24];       /* relay-1, consumer-2 ... */
    const char *command; /* "relay" or "consume" */
    const char *handler; /* consume: the --handler spec; NULL for relays */
    pid_t pid;           /* 0 when not running */
};

/* Starts `self <command> [--handler spec]`, logging to <log_dir>/<name>.log. 0 or -1. */
int obx_demo_proc_start(struct obx_demo_proc *p, const struct obx_config *cfg, const char *self,
                        const char *log_dir);

/* Sends `sig`; SIGKILL also reaps it. */
void obx_demo_proc_kill(struct obx_demo_proc *p, int sig);

/* SIGTERM, then waits up to timeout_ms; returns its exit status, or -1 (then SIGKILLed). */
int obx_demo_proc_stop(struct obx_demo_proc *p, int timeout_ms);

#endif
