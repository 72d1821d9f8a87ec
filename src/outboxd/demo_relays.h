/* SPDX-License-Identifier: MIT */
/*
 * demo_relays.h - relay replicas as child processes of the demo.
 */
#ifndef OBX_DEMO_RELAYS_H
#define OBX_DEMO_RELAYS_H

#include <sys/types.h>

#include "settings.h"

struct obx_demo_relay {
    char name[24];
    pid_t pid; /* 0 when not running */
};

/* Starts `self relay` as replica `index`, logging to <log_dir>/<name>.log. 0 or -1. */
int obx_demo_relay_start(struct obx_demo_relay *r, const struct obx_config *cfg, const char *self,
                         const char *log_dir, int index);

/* Sends `sig`; SIGKILL also reaps it. */
void obx_demo_relay_kill(struct obx_demo_relay *r, int sig);

/* SIGTERM, then waits up to timeout_ms; returns its exit status, or -1 (then SIGKILLed). */
int obx_demo_relay_stop(struct obx_demo_relay *r, int timeout_ms);

#endif
