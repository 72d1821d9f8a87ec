/* SPDX-License-Identifier: MIT */
/*
 * commands.h - outboxd's subcommands. Each returns the process exit code:
 * 0 success, 1 runtime failure, 2 usage or configuration error.
 */
#ifndef OBX_COMMANDS_H
#define OBX_COMMANDS_H

#include "settings.h"

int obx_cmd_relay(const struct obx_config *cfg);
int obx_cmd_consume(const struct obx_config *cfg, int argc, char **argv);

/* Copies the relay part of the configuration into `opts` (no allocation). */
void obx_relay_options_from_config(const struct obx_config *cfg, void *opts);

#endif
