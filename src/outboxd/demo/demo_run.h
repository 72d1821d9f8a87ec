/* SPDX-License-Identifier: MIT */
/*
 * demo_run.h - the demo once its servers are up: relay processes, writers,
 * the progress line, a relay killed and restarted, and the audit.
 */
#ifndef OBX_DEMO_RUN_H
#define OBX_DEMO_RUN_H

#include "demo.h"

#define OBX_DEMO_MAX_RELAYS 8

/* Runs the demo; returns the exit code (0 only when nothing was lost). */
int obx_demo_run(const struct obx_config *cfg, const struct obx_demo_options *o);

#endif
