/* SPDX-License-Identifier: MIT */
/*
 * commands.h - outboxd's subcommands. Each returns the process exit code:
 * 0 success, 1 runtime failure, 2 usage or configuration error.
 */
#ifndef OBX_COMMANDS_H
#define OBX_COMMANDS_H

#include "config/settings.h"
#include "outbox/outbox.h"

/*
 * A library configuration of `kind` holding the daemon's settings (each
 * worker reads the keys of its kind). NULL with `err` set when out of memory.
 */
outbox_config *obx_cmd_worker_config(outbox_config_kind kind, const struct obx_config *cfg,
                                     outbox_error *err);

int obx_cmd_relay(const struct obx_config *cfg);

/* `outboxd relay` with OUTBOX_FLEET_FILE set: every database of the file (fleet_cmd.c). */
int obx_cmd_fleet(const struct obx_config *cfg);
int obx_cmd_consume(const struct obx_config *cfg, int argc, char **argv);

#endif
